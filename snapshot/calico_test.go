package snapshot

import (
	"net/netip"
	"testing"
)

func TestBlockAddrAndOrdinal(t *testing.T) {
	for _, tc := range []struct {
		block string
		n     int
		addr  string
	}{
		{"10.200.0.0/26", 0, "10.200.0.0"},
		{"10.200.0.64/26", 63, "10.200.0.127"},
		{"10.200.0.255/20", 300, "10.200.1.44"}, // not masked: from the block's first address
		{"fd00::40/122", 5, "fd00::45"},
		{"fd00:0:0:0:ffff:ffff:ffff:ffc0/122", 63, "fd00::ffff:ffff:ffff:ffff"},
	} {
		p := netip.MustParsePrefix(tc.block)
		a := BlockAddr(p, tc.n)
		if a.String() != tc.addr {
			t.Errorf("BlockAddr(%s, %d) = %s, want %s", tc.block, tc.n, a, tc.addr)
		}
		if o := BlockOrdinal(p, a); o != tc.n {
			t.Errorf("BlockOrdinal(%s, %s) = %d, want %d", tc.block, a, o, tc.n)
		}
	}
}
