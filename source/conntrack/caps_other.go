//go:build !linux

package conntrack

// CheckNetAdmin returns an error wrapping source.ErrUnsupported outside
// Linux.
func CheckNetAdmin() error { return errNoNetlink }
