//go:build !linux

package conntrack

import (
	"context"
	"fmt"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
)

// errNoNetlink is returned by every operation: only Linux has conntrack.
var errNoNetlink = fmt.Errorf("conntrack: %w: the kernel conntrack table exists only on Linux", source.ErrUnsupported)

// Conn is a netlink socket to the conntrack subsystem. Outside Linux it
// cannot be opened.
type Conn struct{}

// Open returns an error wrapping source.ErrUnsupported outside Linux.
func Open() (*Conn, error) { return nil, errNoNetlink }

// Close does nothing outside Linux.
func (c *Conn) Close() error { return nil }

// Dump returns an error wrapping source.ErrUnsupported outside Linux.
func (c *Conn) Dump(ctx context.Context, fn func(*snapshot.Flow) error) (int, error) {
	return 0, errNoNetlink
}

// Create returns an error wrapping source.ErrUnsupported outside Linux.
func (c *Conn) Create(f *snapshot.Flow) error { return errNoNetlink }

// Delete returns an error wrapping source.ErrUnsupported outside Linux.
func (c *Conn) Delete(f *snapshot.Flow) error { return errNoNetlink }

// Get returns an error wrapping source.ErrUnsupported outside Linux.
func (c *Conn) Get(f *snapshot.Flow) (snapshot.Flow, error) { return snapshot.Flow{}, errNoNetlink }

// GetEach passes an error wrapping source.ErrUnsupported for every entry
// outside Linux, and returns it.
func (c *Conn) GetEach(fs []snapshot.Flow, fn func(int, snapshot.Flow, error)) error {
	for i := range fs {
		fn(i, snapshot.Flow{}, errNoNetlink)
	}
	return errNoNetlink
}

// DeleteEach passes an error wrapping source.ErrUnsupported for every
// entry outside Linux, and returns it.
func (c *Conn) DeleteEach(fs []snapshot.Flow, fn func(int, error)) error {
	for i := range fs {
		fn(i, errNoNetlink)
	}
	return errNoNetlink
}

// DeleteJudged returns an error wrapping source.ErrUnsupported outside
// Linux.
func (c *Conn) DeleteJudged(f *snapshot.Flow) error { return errNoNetlink }

// DeleteJudgedEach passes an error wrapping source.ErrUnsupported for
// every entry outside Linux, and returns it.
func (c *Conn) DeleteJudgedEach(fs []snapshot.Flow, fn func(int, error)) error {
	return c.DeleteEach(fs, fn)
}
