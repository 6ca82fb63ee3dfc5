package host

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// The calling namespace's addresses are read: loopback is always one.
func TestLocal(t *testing.T) {
	as, err := Local()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(as, netip.MustParseAddr("127.0.0.1")) {
		t.Errorf("host addresses %v lack 127.0.0.1", as)
	}
}

func TestCollect(t *testing.T) {
	addrs := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	src := &Addresses{Read: func() ([]netip.Addr, error) {
		return addrs("198.51.100.7", "::ffff:10.0.0.1", "fd00::1", "10.0.0.1", "127.0.0.1"), nil
	}}
	var s snapshot.Snapshot
	if err := src.Collect(context.Background(), &s); err != nil {
		t.Fatal(err)
	}
	if want := addrs("10.0.0.1", "127.0.0.1", "198.51.100.7", "fd00::1"); !slices.Equal(s.LocalAddresses, want) {
		t.Errorf("addresses %v, want %v (sorted, unmapped, once each)", s.LocalAddresses, want)
	}
	if got := src.Describe(&s); got != "4 local addresses (NodePort frontends)" {
		t.Errorf("Describe = %q", got)
	}

	boom := errors.New("netlink: permission denied")
	failing := &Addresses{Read: func() ([]netip.Addr, error) { return nil, boom }}
	var f snapshot.Snapshot
	if err := failing.Collect(context.Background(), &f); !errors.Is(err, boom) || f.LocalAddresses != nil {
		t.Errorf("a failed read: err %v, addresses %v; want the error and the snapshot untouched", err, f.LocalAddresses)
	}
}
