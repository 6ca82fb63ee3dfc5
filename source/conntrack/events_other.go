//go:build !linux

package conntrack

import "context"

// Subscription is a subscription to conntrack events. Outside Linux it
// cannot be opened.
type Subscription struct{}

// Subscribe returns an error wrapping source.ErrUnsupported outside Linux.
func Subscribe() (*Subscription, error) { return nil, errNoNetlink }

// Run returns an error wrapping source.ErrUnsupported outside Linux.
func (s *Subscription) Run(ctx context.Context, fn func(Event) error) error { return errNoNetlink }

// Close does nothing outside Linux.
func (s *Subscription) Close() error { return nil }

// EventsEnabled returns an error wrapping source.ErrUnsupported outside
// Linux: there are no conntrack events to enable.
func EventsEnabled() (bool, error) { return false, errNoNetlink }
