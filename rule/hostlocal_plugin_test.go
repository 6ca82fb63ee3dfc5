package rule

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/lab/cni"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/hostlocal"
)

// The address ghostwatch predicts for host-local's next ADD is the one the
// real plugin returns, on stores the plugin itself made: random range sets
// (gateways inside and outside them, explicit starts and ends, two ranges
// in one set), random ADDs and DELs, and the damage seen on nodes (files
// removed, last_reserved_ip removed or pointing outside the set). The
// store and the configuration are read as the agent reads them, from under
// a host root.
func TestNextAllocationIsHostLocals(t *testing.T) {
	bin, err := cni.FindHostLocal()
	if errors.Is(err, cni.ErrNoBinary) {
		testenv.Unavailable(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	for seed := range uint64(60) {
		rng := rand.New(rand.NewPCG(seed, 11))
		ranges := randomRangeSet(rng)
		root := t.TempDir()
		h := cni.HostLocal{Name: "gwnet", DataDir: filepath.Join(root, "var/lib/cni/networks"), Ranges: [][]cni.Range{ranges}}
		conf, err := h.Config()
		if err != nil {
			t.Fatal(err)
		}
		// The node's configuration: the same ranges, host-local's default
		// data directory (which the root holds).
		nodeConf := strings.Replace(string(conf), fmt.Sprintf(`"dataDir":%q,`, h.DataDir), "", 1)
		if err := os.MkdirAll(filepath.Join(root, "etc/cni/net.d"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "etc/cni/net.d/10-gwnet.conf"), []byte(nodeConf), 0o644); err != nil {
			t.Fatal(err)
		}
		plugin := cni.Plugin{Bin: bin, Config: conf}
		ctr := func(i int) cni.Container {
			return cni.Container{ID: fmt.Sprintf("c%d", i), Netns: filepath.Join(root, "netns"), IfName: "eth0"}
		}
		store := h.Store().Dir
		var live []int
		ops := []string{}
		for i := range 4 + rng.IntN(14) {
			switch k := rng.IntN(10); {
			case k < 6 || len(live) == 0:
				if _, err := plugin.Add(context.Background(), ctr(i)); err == nil {
					live = append(live, i)
					ops = append(ops, fmt.Sprintf("add c%d", i))
				} else {
					ops = append(ops, fmt.Sprintf("add c%d: full", i))
				}
			case k < 8:
				j := rng.IntN(len(live))
				if err := plugin.Del(context.Background(), ctr(live[j])); err != nil {
					t.Fatal(err)
				}
				ops = append(ops, fmt.Sprintf("del c%d", live[j]))
				live = append(live[:j], live[j+1:]...)
			case k < 9:
				// A file lost: the pod keeps its address, the ledger not.
				files, _ := filepath.Glob(filepath.Join(store, "10.*"))
				if len(files) > 0 {
					f := files[rng.IntN(len(files))]
					os.Remove(f)
					ops = append(ops, "lose "+filepath.Base(f))
				}
			default:
				if rng.IntN(2) == 0 {
					os.Remove(filepath.Join(store, "last_reserved_ip.0"))
					ops = append(ops, "lose last_reserved_ip.0")
				} else {
					os.WriteFile(filepath.Join(store, "last_reserved_ip.0"), []byte("192.0.2.1"), 0o644)
					ops = append(ops, "last_reserved_ip.0 outside the set")
				}
			}
		}
		s := &snapshot.Snapshot{}
		if err := (&hostlocal.Source{Root: root}).Collect(context.Background(), s); err != nil {
			t.Fatalf("seed %d: reading the store: %v", seed, err)
		}
		n := s.HostLocal.Networks[0]
		reserved := map[netip.Addr]*snapshot.Reservation{}
		for i := range n.Reservations {
			reserved[n.Reservations[i].IP] = &n.Reservations[i]
		}
		want := nextAllocation(n.RangeSets[0], n.LastReserved[0], reserved)
		res, err := plugin.Add(context.Background(), ctr(99))
		var got netip.Addr
		switch {
		case err != nil && strings.Contains(err.Error(), "no IP addresses available"):
		case err != nil:
			t.Fatalf("seed %d: %v", seed, err)
		default:
			got = res.IPs[0].Address.Addr()
		}
		if got != want {
			t.Errorf("seed %d, ranges %+v, after %s: host-local gave %v, ghostwatch predicted %v",
				seed, ranges, strings.Join(ops, ", "), got, want)
		}
	}
}

// randomRangeSet is one or two small IPv4 ranges, with host-local's
// defaults or explicit starts, ends and gateways.
func randomRangeSet(rng *rand.Rand) []cni.Range {
	one := func(third byte) cni.Range {
		bits := 28 + rng.IntN(2)
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 9, third, 0}), bits)
		r := cni.Range{Subnet: p}
		size := 1 << (32 - bits)
		at := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 9, third, byte(i)}) }
		if rng.IntN(3) == 0 {
			r.RangeStart = at(1 + rng.IntN(3))
		}
		if rng.IntN(3) == 0 {
			r.RangeEnd = at(size - 2 - rng.IntN(3))
		}
		switch rng.IntN(4) {
		case 0:
			r.Gateway = at(1 + rng.IntN(size-2)) // inside, anywhere
		case 1:
			r.Gateway = netip.AddrFrom4([4]byte{10, 9, 200, 1}) // outside
		}
		return r
	}
	set := []cni.Range{one(0)}
	if rng.IntN(3) == 0 {
		set = append(set, one(1))
	}
	return set
}
