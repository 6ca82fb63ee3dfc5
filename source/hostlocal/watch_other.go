//go:build !linux

package hostlocal

import (
	"context"
	"errors"
)

// Start does not watch: inotify is Linux's. The ledger is read at audits
// alone.
func (w *Watch) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w.warn(errors.New("watching needs Linux's inotify"))
	return nil
}
