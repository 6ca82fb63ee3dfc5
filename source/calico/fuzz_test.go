package calico

import (
	"bytes"
	"encoding/json"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// checkBlock fails t unless b holds together whatever the input was: every
// address it returns lies in the block's CIDR at its ordinal, each ordinal
// once, and the counts add up to no more than the block's size (exactly
// its size when nothing is malformed).
func checkBlock(t *testing.T, b snapshot.IPAMBlock) {
	t.Helper()
	if len(b.Malformed) > maxProblems+1 {
		t.Errorf("%d problems listed", len(b.Malformed))
	}
	if !b.CIDR.IsValid() {
		if len(b.Allocations)+len(b.Cooldown)+len(b.Free) > 0 || len(b.Malformed) == 0 {
			t.Errorf("no CIDR, yet %d allocations, %d in cooldown, %d free, malformed %q", len(b.Allocations), len(b.Cooldown), len(b.Free), b.Malformed)
		}
		return
	}
	if b.CIDR != b.CIDR.Masked() {
		t.Errorf("CIDR %s not masked", b.CIDR)
	}
	host := b.CIDR.Addr().BitLen() - b.CIDR.Bits()
	size := new(big.Int).Lsh(big.NewInt(1), uint(host))
	base := new(big.Int).SetBytes(b.CIDR.Addr().AsSlice())
	seen := map[int]bool{}
	place := func(what string, ord int, ip netip.Addr) {
		if ord < 0 || big.NewInt(int64(ord)).Cmp(size) >= 0 {
			t.Errorf("%s ordinal %d outside the %s addresses of %s", what, ord, size, b.CIDR)
			return
		}
		want := new(big.Int).Add(base, big.NewInt(int64(ord)))
		if got := new(big.Int).SetBytes(ip.AsSlice()); got.Cmp(want) != 0 || !b.CIDR.Contains(ip) {
			t.Errorf("%s ordinal %d of %s is %s", what, ord, b.CIDR, ip)
		}
		if seen[ord] {
			t.Errorf("ordinal %d returned twice", ord)
		}
		seen[ord] = true
	}
	last := -1
	for _, a := range b.Allocations {
		place("allocation", a.Ordinal, a.IP)
		if a.Ordinal <= last {
			t.Errorf("allocations out of order: %d after %d", a.Ordinal, last)
		}
		last = a.Ordinal
		if !a.Timestamp.IsZero() && a.Timestamp.Location() != time.UTC {
			t.Errorf("timestamp %v not in UTC", a.Timestamp)
		}
	}
	for _, c := range b.Cooldown {
		place("cooldown", c.Ordinal, c.IP)
	}
	n := big.NewInt(int64(len(b.Allocations) + len(b.Cooldown) + len(b.Free)))
	if n.Cmp(size) > 0 {
		t.Errorf("%d allocated, %d in cooldown, %d free in %s", len(b.Allocations), len(b.Cooldown), len(b.Free), b.CIDR)
	}
	if len(b.Malformed) == 0 && n.Cmp(size) != 0 {
		t.Errorf("well formed, yet %s of %s addresses accounted for", n, size)
	}
}

// seedBlocks adds the golden blocks, each alone, to a fuzz corpus.
func seedBlocks(f *testing.F) {
	for _, dir := range []string{seed002, filepath.Join(seed002, "after-gc")} {
		b, err := os.ReadFile(filepath.Join(dir, "ipamblocks.json"))
		if err != nil {
			f.Fatal(err)
		}
		var objs []json.RawMessage
		if err := json.Unmarshal(b, &objs); err != nil {
			f.Fatal(err)
		}
		for _, o := range objs {
			f.Add([]byte(o))
		}
	}
	f.Add([]byte(`{"spec":{"cidr":"fd00::/126","allocations":[0,0,null,1],"unallocated":[2],"attributes":[{"handle_id":"h"},{"releasedAt":"2026-11-23T17:50:00Z"}]}}`))
	f.Add([]byte(`{"spec":{"cidr":"10.0.0.0/31","allocations":[9,-1,1e300,"x",{}],"unallocated":[0,0,7],"attributes":[null,[],{"secondary":7}]}}`))
	f.Add([]byte(`{"spec":{"cidr":"::/0","allocations":[0],"unallocated":[340282366920938463463374607431768211455],"attributes":[{}]}}`))
}

// Any JSON object converts without panicking into a block that holds
// together, and so do the other kinds read from it.
func FuzzBlockJSON(f *testing.F) {
	seedBlocks(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var obj map[string]any
		if dec.Decode(&obj) != nil || obj == nil {
			return
		}
		checkBlock(t, Block(obj))
		// The other kinds read the same map without panicking.
		c := &snapshot.Calico{}
		for _, kind := range Kinds {
			obj["apiVersion"], obj["kind"] = APIVersion, kind
			Add(c, obj)
		}
		Sort(c)
	})
}

// A block made of fuzzed lists: allocations index into attributes (0xff is
// null), some attributes are in cooldown, unallocated lists ordinals.
func FuzzBlockLists(f *testing.F) {
	f.Add("10.0.0.0/30", []byte{0, 0xff, 1, 0xff}, uint8(2), uint8(1), []byte{1, 3})
	f.Add("fd00::/126", []byte{0xff, 0xff, 0xff, 0xff}, uint8(0), uint8(0), []byte{0, 1, 2, 3})
	f.Add("10.0.0.255/32", []byte{5}, uint8(1), uint8(0), []byte{0, 0, 1})
	f.Add("10.0.0.0/26", bytes.Repeat([]byte{0}, 64), uint8(1), uint8(0), []byte{})
	f.Fuzz(func(t *testing.T, cidr string, allocs []byte, nattrs, cooling uint8, free []byte) {
		al := make([]any, len(allocs))
		for i, a := range allocs {
			if a != 0xff {
				al[i] = int64(a) - 2
			}
		}
		attrs := make([]any, nattrs)
		for i := range attrs {
			attr := map[string]any{"handle_id": "h", "secondary": map[string]any{"timestamp": "2026-11-23 17:49:31 +0000 UTC"}}
			if i < int(cooling) {
				attr["releasedAt"] = "2026-11-23T17:50:00Z"
			}
			attrs[i] = attr
		}
		fl := make([]any, len(free))
		for i, o := range free {
			fl[i] = json.Number(big.NewInt(int64(o) - 1).String())
		}
		checkBlock(t, Block(map[string]any{"spec": map[string]any{
			"cidr": cidr, "allocations": al, "attributes": attrs, "unallocated": fl,
		}}))
	})
}
