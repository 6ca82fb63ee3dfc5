package calico

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// seed002 holds the objects Calico v3.30.1 wrote in the API server at each
// step of seed 002, read back from it (lab/calico's golden files, described
// in their README).
const seed002 = "../../lab/calico/testdata/seed002"

// The values Calico wrote where the golden files hold "<volatile>" (they
// change from run to run): those of the run the README quotes.
const (
	stampWritten = "2026-11-23 17:49:31.768271843 +0000 UTC"
	seqWritten   = 1795456171884406479
	seqAllocated = 1795456171884406478
)

var stampRead = time.Date(2026, 11, 23, 17, 49, 31, 768271843, time.UTC)

// readObjects decodes a JSON list of objects as the file reader does.
func readObjects(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var objs []map[string]any
	if err := dec.Decode(&objs); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return objs
}

// unvolatile puts back, in Calico's own formats, the values the golden
// files replaced.
func unvolatile(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			switch {
			case x != "<volatile>":
				v[k] = unvolatile(x)
			case k == "timestamp":
				v[k] = stampWritten
			case k == "sequenceNumber":
				v[k] = json.Number("1795456171884406479")
			default:
				// sequenceNumberForAllocation's values.
				v[k] = json.Number("1795456171884406478")
			}
		}
	case []any:
		for i := range v {
			v[i] = unvolatile(v[i])
		}
	}
	return v
}

// ledger converts the golden files of one step.
func ledger(t *testing.T, dir string, fill bool) *snapshot.Calico {
	t.Helper()
	c := &snapshot.Calico{}
	for _, f := range []string{"ipamblocks.json", "ipamhandles.json", "blockaffinities.json"} {
		for _, obj := range readObjects(t, filepath.Join(dir, f)) {
			if fill {
				unvolatile(obj)
			}
			if !Add(c, obj) {
				t.Fatalf("%s: %s %s not added", f, obj["kind"], nameOf(obj))
			}
		}
	}
	Sort(c)
	return c
}

const (
	handleMisbooked = "k8s-pod-network.8effe9b9c08658aef57b3d02e933426405ea15878d70a1cb0880d2f6f7b1e44d"
	handleControl   = "k8s-pod-network.0fcd568a5cb9bdb4677b69354b11ee415af8f784519cff3da49a26f84eaee7f2"
	handleDeleted   = "k8s-pod-network.f0fda54f3d19905317b499eba097290a3c8f002f6b1d07804846b3e7cfd92f77"
)

func podBlock(name, cidr, node, pod, handle string) snapshot.IPAMBlock {
	p := netip.MustParsePrefix(cidr)
	return snapshot.IPAMBlock{
		Name: name, CIDR: p, Affinity: node, SequenceNumber: seqWritten,
		Allocations: []snapshot.Allocation{{
			Ordinal: 0, IP: p.Addr(), HandleID: handle, Node: node, Pod: pod, Namespace: "default",
			Timestamp: stampRead, SequenceNumber: seqAllocated,
		}},
		Free: []int{1, 2, 3},
	}
}

func handle(id, cidr string) snapshot.IPAMHandle {
	return snapshot.IPAMHandle{Name: id, ID: id, Blocks: []snapshot.HandleBlock{{CIDR: netip.MustParsePrefix(cidr), Count: 1}}}
}

func confirmed(node, cidr string) snapshot.BlockAffinity {
	return snapshot.BlockAffinity{
		Name: node + "-" + strings.NewReplacer(".", "-", "/", "-").Replace(cidr),
		CIDR: netip.MustParsePrefix(cidr), Node: node, State: "confirmed", Type: "host",
	}
}

// The ledger as calico-ipam left it in seed 002: pod misbooked, running on
// node-b, booked under the stale name node-a in node-a's block; the
// controls under their own names. Then as calico-kube-controllers left it
// after freeing misbooked's address: node-a's block empty, its four
// addresses free, misbooked's handle gone, node-a's affinity kept.
func TestSeed002Ledger(t *testing.T) {
	misbooked := podBlock("10-244-0-0-30", "10.244.0.0/30", "node-a", "misbooked", handleMisbooked)
	control := podBlock("10-244-0-4-30", "10.244.0.4/30", "node-b", "control", handleControl)
	onDeleted := podBlock("10-244-0-8-30", "10.244.0.8/30", "node-c", "booked-on-deleted", handleDeleted)
	affinities := []snapshot.BlockAffinity{
		confirmed("node-a", "10.244.0.0/30"), confirmed("node-b", "10.244.0.4/30"), confirmed("node-c", "10.244.0.8/30"),
	}
	want := &snapshot.Calico{
		Blocks: []snapshot.IPAMBlock{misbooked, control, onDeleted},
		Handles: []snapshot.IPAMHandle{
			handle(handleControl, "10.244.0.4/30"), handle(handleMisbooked, "10.244.0.0/30"), handle(handleDeleted, "10.244.0.8/30"),
		},
		Affinities: affinities,
	}
	if got := ledger(t, seed002, true); !reflect.DeepEqual(got, want) {
		t.Errorf("before the collector:\n got %+v\nwant %+v", got, want)
	}

	freed := snapshot.IPAMBlock{
		Name: "10-244-0-0-30", CIDR: netip.MustParsePrefix("10.244.0.0/30"), Affinity: "node-a",
		SequenceNumber: seqWritten, Free: []int{1, 2, 3, 0},
	}
	want = &snapshot.Calico{
		Blocks:     []snapshot.IPAMBlock{freed, control, onDeleted},
		Handles:    []snapshot.IPAMHandle{handle(handleControl, "10.244.0.4/30"), handle(handleDeleted, "10.244.0.8/30")},
		Affinities: affinities,
	}
	if got := ledger(t, filepath.Join(seed002, "after-gc"), true); !reflect.DeepEqual(got, want) {
		t.Errorf("after the collector:\n got %+v\nwant %+v", got, want)
	}
}

// The ledger holds each allocation calicoctl ipam check reported from the
// same objects, and no other: the same address, handle, pod, namespace
// and node.
func TestSeed002AsCalicoctlReads(t *testing.T) {
	for _, step := range []struct{ dir, report string }{
		{seed002, "ipam-check-before.json"},
		{filepath.Join(seed002, "after-gc"), "ipam-check-after-gc.json"},
	} {
		b, err := os.ReadFile(filepath.Join(seed002, step.report))
		if err != nil {
			t.Fatal(err)
		}
		var report struct {
			Allocations map[string][]struct {
				IP, Handle, Pod, Namespace, Node string
			}
		}
		if err := json.Unmarshal(b, &report); err != nil {
			t.Fatal(err)
		}
		got := map[string]snapshot.Allocation{}
		for _, blk := range ledger(t, step.dir, true).Blocks {
			for _, a := range blk.Allocations {
				got[a.IP.String()] = a
			}
		}
		if len(got) != len(report.Allocations) {
			t.Errorf("%s: %d allocations, calicoctl reports %d", step.report, len(got), len(report.Allocations))
		}
		for ip, as := range report.Allocations {
			a, ok := got[ip]
			if len(as) != 1 || !ok || as[0].Handle != a.HandleID || as[0].Pod != a.Pod || as[0].Namespace != a.Namespace || as[0].Node != a.Node {
				t.Errorf("%s: %s: ledger %+v, calicoctl %+v", step.report, ip, a, as)
			}
		}
	}
}

// The golden files as stored, with "<volatile>" where Calico wrote numbers
// and times: each unreadable field is a problem of its block, and the
// allocation is kept with what could be read.
func TestSeed002Placeholders(t *testing.T) {
	c := ledger(t, seed002, false)
	b := c.Blocks[0]
	want := []string{
		`sequenceNumber is the string "<volatile>", not an integer`,
		`attributes[0].secondary.timestamp "<volatile>" is not a time`,
		`sequenceNumberForAllocation["0"] is the string "<volatile>", not an integer`,
	}
	if !reflect.DeepEqual(b.Malformed, want) {
		t.Errorf("malformed %q\nwant %q", b.Malformed, want)
	}
	if len(b.Allocations) != 1 || b.Allocations[0].Pod != "misbooked" || !b.Allocations[0].Timestamp.IsZero() ||
		b.Allocations[0].SequenceNumber != 0 || b.SequenceNumber != 0 || len(b.Free) != 3 {
		t.Errorf("block %+v", b)
	}
}
