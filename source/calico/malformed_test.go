package calico

import (
	"encoding/json"
	"math"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// decode reads a JSON object as the file reader does.
func decode(t *testing.T, s string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	return m
}

// blockOf is an IPAMBlock object with spec.
func blockOf(t *testing.T, spec string) map[string]any {
	return decode(t, `{"apiVersion":"crd.projectcalico.org/v1","kind":"IPAMBlock","metadata":{"name":"b"},"spec":`+spec+`}`)
}

func addrs(as []snapshot.Allocation) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.IP.String()+"="+a.HandleID)
	}
	return out
}

// Every way a block can be wrong that the converter tells, each with what
// is still read of the block.
func TestBlockMalformed(t *testing.T) {
	for _, tc := range []struct {
		name      string
		spec      string
		allocated []string // IP=handle
		cooldown  int
		free      int
		malformed []string
	}{
		{
			name:      "well formed after churn: allocations point into attributes in any order",
			spec:      `{"cidr":"10.0.0.0/30","allocations":[1,null,0,null],"unallocated":[3,1],"attributes":[{"handle_id":"h2"},{"handle_id":"h0"}]}`,
			allocated: []string{"10.0.0.0=h0", "10.0.0.2=h2"}, free: 2,
		},
		{
			name:      "one attribute shared by two addresses of one handle",
			spec:      `{"cidr":"fd00::/126","allocations":[0,0,null,null],"unallocated":[2,3],"attributes":[{"handle_id":"h"}]}`,
			allocated: []string{"fd00::=h", "fd00::1=h"}, free: 2,
		},
		{
			name:      "allocation pointing past the attributes: still allocated",
			spec:      `{"cidr":"10.0.0.0/30","allocations":[0,5,null,null],"unallocated":[2,3],"attributes":[{"handle_id":"h"}]}`,
			allocated: []string{"10.0.0.0=h", "10.0.0.1="}, free: 2,
			malformed: []string{"allocation 1 (10.0.0.1) points at attribute 5; the block has 1"},
		},
		{
			name:      "negative attribute index",
			spec:      `{"cidr":"10.0.0.0/30","allocations":[-1,null,null,null],"unallocated":[1,2,3],"attributes":[]}`,
			allocated: []string{"10.0.0.0="}, free: 3,
			malformed: []string{"allocation 0 (10.0.0.0) points at attribute -1; the block has 0"},
		},
		{
			name: "more allocations than the CIDR has addresses",
			spec: `{"cidr":"10.0.0.0/31","allocations":[null,null,0],"unallocated":[0,1],"attributes":[{"handle_id":"h"}]}`,
			free: 2,
			malformed: []string{
				"allocations has 3 entries for the 2 addresses of 10.0.0.0/31",
				"allocations[2] is allocated, beyond the 2 addresses of 10.0.0.0/31",
			},
		},
		{
			name:      "fewer allocations than addresses",
			spec:      `{"cidr":"10.0.0.0/30","allocations":[null,null],"unallocated":[0,1,2,3],"attributes":[]}`,
			free:      4,
			malformed: []string{"allocations has 2 entries for the 4 addresses of 10.0.0.0/30"},
		},
		{
			name:      "unallocated out of range, repeated, allocated",
			spec:      `{"cidr":"10.0.0.0/30","allocations":[0,null,null,null],"unallocated":[1,1,0,4,-1,2,3],"attributes":[{"handle_id":"h"}]}`,
			allocated: []string{"10.0.0.0=h"}, free: 3,
			malformed: []string{
				"ordinal 1 is listed twice in unallocated",
				"ordinal 0 (10.0.0.0) is both allocated and in unallocated",
				"unallocated[3] is ordinal 4, outside the 4 addresses of 10.0.0.0/30",
				"unallocated[4] is ordinal -1, outside the 4 addresses of 10.0.0.0/30",
			},
		},
		{
			name:      "an address neither allocated nor free is lost",
			spec:      `{"cidr":"10.0.0.0/30","allocations":[null,null,null,null],"unallocated":[0,2],"attributes":[]}`,
			free:      2,
			malformed: []string{"2 of the 4 addresses are neither allocated nor in unallocated: Calico never hands them out"},
		},
		{
			name:      "an attribute no allocation uses",
			spec:      `{"cidr":"10.0.0.0/30","allocations":[null,null,null,null],"unallocated":[0,1,2,3],"attributes":[{"handle_id":"gone"}]}`,
			free:      4,
			malformed: []string{"attributes[0] is used by no allocation"},
		},
		{
			name:      "unreadable CIDR: nothing can be placed",
			spec:      `{"cidr":"10.0.0.300/30","allocations":[0,null,null,null],"unallocated":[1,2,3],"attributes":[{"handle_id":"h"}]}`,
			malformed: []string{`cidr "10.0.0.300/30" is not a CIDR`, "1 allocated ordinals cannot be placed without the block's CIDR"},
		},
		{
			name:      "no CIDR",
			spec:      `{"allocations":[],"unallocated":[],"attributes":[]}`,
			malformed: []string{"no cidr"},
		},
		{
			name:      "CIDR with host bits, read as Calico reads it",
			spec:      `{"cidr":"10.0.0.1/31","allocations":[null,0],"unallocated":[0],"attributes":[{"handle_id":"h"}]}`,
			allocated: []string{"10.0.0.1=h"}, free: 1,
			malformed: []string{"cidr 10.0.0.1/31 has host bits set; read as 10.0.0.0/31"},
		},
		{
			name:      "no lists at all",
			spec:      `{"cidr":"10.0.0.0/31"}`,
			malformed: []string{"no attributes", "no allocations", "allocations has 0 entries for the 2 addresses of 10.0.0.0/31", "no unallocated"},
		},
		{
			name: "values of the wrong type",
			spec: `{"cidr":"10.0.0.0/30","affinity":7,"deleted":"no","sequenceNumber":-3,
				"allocations":[0,"1",1.5,null],"unallocated":[3,"x"],
				"attributes":[{"handle_id":5,"secondary":{"node":["a"],"pod":"p","timestamp":"yesterday"}},"flat"],
				"sequenceNumberForAllocation":{"0":"soon","x":1}}`,
			allocated: []string{"10.0.0.0="}, free: 1,
			malformed: []string{
				"affinity is the number 7, not a string",
				"deleted is the string \"no\", not a boolean",
				"sequenceNumber is -3, negative",
				"attributes[0].handle_id is the number 5, not a string",
				"attributes[0].secondary.node is a list, not a string",
				`attributes[0].secondary.timestamp "yesterday" is not a time`,
				"attributes[1] is the string \"flat\", not an object",
				`allocations[1] is the string "1", not an integer: not an attribute index`,
				"allocations[2] is 1.5, not an integer: not an attribute index",
				"attributes[1] is used by no allocation",
				`unallocated[1] is the string "x", not an integer: not an ordinal`,
				`sequenceNumberForAllocation["0"] is the string "soon", not an integer`,
				`sequenceNumberForAllocation has key "x", not an ordinal`,
			},
		},
		{
			name:      "an affinity of neither form",
			spec:      `{"cidr":"10.0.0.0/32","affinity":"node-a","allocations":[null],"unallocated":[0],"attributes":[]}`,
			free:      1,
			malformed: []string{`affinity "node-a" is neither host:<node> nor virtual:<name>`},
		},
		{
			name:      "a CIDR larger than any Calico block",
			spec:      `{"cidr":"10.0.0.0/16","allocations":[null,0],"unallocated":[0],"attributes":[{"handle_id":"h"}]}`,
			allocated: []string{"10.0.0.1=h"}, free: 1,
			malformed: []string{"cidr 10.0.0.0/16 holds 65536 addresses, more than any Calico block (4096)", "allocations has 2 entries for the 65536 addresses of 10.0.0.0/16"},
		},
		{
			name: "cooldown entries (Calico 3.34): released, not allocated",
			spec: `{"cidr":"10.0.0.0/30","allocations":[1,0,1,null],"unallocated":[3],
				"attributes":[{"handle_id":"h","secondary":{"pod":"p"}},{"releasedAt":"2026-11-23T17:50:00Z"}]}`,
			allocated: []string{"10.0.0.1=h"}, cooldown: 2, free: 1,
		},
		{
			name:     "cooldown entry both released and free",
			spec:     `{"cidr":"10.0.0.0/31","allocations":[0,null],"unallocated":[0,1],"attributes":[{"releasedAt":"then"}]}`,
			cooldown: 1, free: 1,
			malformed: []string{`attributes[0].releasedAt "then" is not a time`, "ordinal 0 (10.0.0.0) is both in cooldown and in unallocated"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := Block(blockOf(t, tc.spec))
			if got := addrs(b.Allocations); !reflect.DeepEqual(got, tc.allocated) {
				t.Errorf("allocations %q, want %q", got, tc.allocated)
			}
			if len(b.Cooldown) != tc.cooldown || len(b.Free) != tc.free {
				t.Errorf("cooldown %d, unallocated %d; want %d, %d", len(b.Cooldown), len(b.Free), tc.cooldown, tc.free)
			}
			if !reflect.DeepEqual(b.Malformed, tc.malformed) {
				t.Errorf("malformed:\n%s\nwant:\n%s", strings.Join(b.Malformed, "\n"), strings.Join(tc.malformed, "\n"))
			}
			checkBlock(t, b)
		})
	}
}

func TestBlockCooldown(t *testing.T) {
	b := Block(blockOf(t, `{"cidr":"10.0.0.0/30","allocations":[1,0,1,null],"unallocated":[3],
		"attributes":[{"handle_id":"h","secondary":{"pod":"p"}},{"releasedAt":"2026-11-23T17:50:00Z"}]}`))
	at := time.Date(2026, 11, 23, 17, 50, 0, 0, time.UTC)
	want := []snapshot.Cooldown{
		{Ordinal: 0, IP: netip.MustParseAddr("10.0.0.0"), ReleasedAt: at},
		{Ordinal: 2, IP: netip.MustParseAddr("10.0.0.2"), ReleasedAt: at},
	}
	if !reflect.DeepEqual(b.Cooldown, want) {
		t.Errorf("cooldown %+v", b.Cooldown)
	}
}

// Tunnel addresses carry a type and no pod; LoadBalancer addresses a
// service; a block of Calico 3.31 and later may be a LoadBalancer's.
func TestBlockAttributes(t *testing.T) {
	b := Block(blockOf(t, `{"cidr":"10.0.0.0/31","affinity":"virtual:lb","deleted":true,"allocations":[0,1],"unallocated":[],
		"attributes":[{"handle_id":"ipip-tunnel-addr-node-a","secondary":{"node":"node-a","type":"ipipTunnelAddress"}},
		              {"handle_id":"lb-x","secondary":{"namespace":"web","service":"front","timestamp":"2026-11-23 18:49:31.5 +0100 CET"}}],
		"sequenceNumberForAllocation":{"1":42}}`))
	want := snapshot.IPAMBlock{
		Name: "b", CIDR: netip.MustParsePrefix("10.0.0.0/31"), OtherAffinity: "virtual:lb", Deleted: true,
		Allocations: []snapshot.Allocation{
			{Ordinal: 0, IP: netip.MustParseAddr("10.0.0.0"), HandleID: "ipip-tunnel-addr-node-a", Node: "node-a", Type: "ipipTunnelAddress"},
			{Ordinal: 1, IP: netip.MustParseAddr("10.0.0.1"), HandleID: "lb-x", Namespace: "web", Service: "front",
				Timestamp: time.Date(2026, 11, 23, 17, 49, 31, 500000000, time.UTC), SequenceNumber: 42},
		},
	}
	if !reflect.DeepEqual(b, want) {
		t.Errorf("got  %+v\nwant %+v", b, want)
	}
}

// Sequence numbers exceed 2^53: they read exactly from JSON decoded with
// UseNumber and from the dynamic client's int64, and are a problem, never a
// rounded number, when a plain decoder made them float64.
func TestSequenceNumbers(t *testing.T) {
	const big = 1795456171884406479
	for _, tc := range []struct {
		name string
		v    any
		want uint64
		bad  string
	}{
		{"json.Number", json.Number("1795456171884406479"), big, ""},
		{"int64", int64(big), big, ""},
		{"uint64 beyond int64", uint64(math.MaxUint64), math.MaxUint64, ""},
		{"json.Number beyond int64", json.Number("18446744073709551615"), math.MaxUint64, ""},
		{"float64 rounded", float64(big), 0, "is 1.7954561718844065e+18, read as a floating-point number beyond 2^53: its exact value is lost"},
		{"float64 exact", float64(1 << 40), 1 << 40, ""},
		{"negative", json.Number("-1"), 0, "is -1, negative"},
		{"beyond 2^64", json.Number("18446744073709551616"), 0, "is 18446744073709551616, out of range"},
	} {
		b := Block(map[string]any{"spec": map[string]any{
			"cidr": "10.0.0.0/32", "allocations": []any{nil}, "unallocated": []any{json.Number("0")}, "attributes": []any{},
			"sequenceNumber": tc.v,
		}})
		var bad []string
		if tc.bad != "" {
			bad = []string{"sequenceNumber " + tc.bad}
		}
		if b.SequenceNumber != tc.want || !reflect.DeepEqual(b.Malformed, bad) {
			t.Errorf("%s: %d %q, want %d %q", tc.name, b.SequenceNumber, b.Malformed, tc.want, tc.bad)
		}
	}
}

func TestHandle(t *testing.T) {
	for _, tc := range []struct {
		name, obj string
		want      snapshot.IPAMHandle
	}{
		{
			name: "a pod's handle in two blocks, named by its ID lowercased",
			obj:  `{"metadata":{"name":"k8s-pod-network.abc"},"spec":{"handleID":"k8s-pod-network.ABC","block":{"10.0.0.4/30":1,"10.0.0.0/30":2},"deleted":false}}`,
			want: snapshot.IPAMHandle{Name: "k8s-pod-network.abc", ID: "k8s-pod-network.ABC", Blocks: []snapshot.HandleBlock{
				{CIDR: netip.MustParsePrefix("10.0.0.0/30"), Count: 2}, {CIDR: netip.MustParsePrefix("10.0.0.4/30"), Count: 1},
			}},
		},
		{
			name: "misnamed, bad keys and counts",
			obj:  `{"metadata":{"name":"other"},"spec":{"handleID":"h","block":{"nope":1,"10.0.0.0/30":0,"10.0.0.4/30":"2"},"deleted":true}}`,
			want: snapshot.IPAMHandle{Name: "other", ID: "h", Deleted: true,
				Blocks: []snapshot.HandleBlock{{CIDR: netip.MustParsePrefix("10.0.0.0/30"), Count: 0}},
				Malformed: []string{
					"named other, not h: Calico finds a handle by its ID lowercased",
					`block["10.0.0.0/30"] counts 0 addresses`, `block["10.0.0.4/30"] is the string "2", not an integer`, `block has key "nope", not a CIDR`,
				}},
		},
		{
			name: "no handleID",
			obj:  `{"metadata":{"name":"h"},"spec":{}}`,
			want: snapshot.IPAMHandle{Name: "h", Malformed: []string{"no handleID"}},
		},
	} {
		h := Handle(decode(t, tc.obj))
		// Map order: the problems of the block map come in any order.
		slices.Sort(h.Malformed)
		slices.Sort(tc.want.Malformed)
		if !reflect.DeepEqual(h, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, h, tc.want)
		}
	}
}

func TestAffinityAndPool(t *testing.T) {
	a := Affinity(decode(t, `{"metadata":{"name":"n-10-0-0-0-30"},"spec":{"cidr":"10.0.0.0/30","node":"n","state":"pendingDeletion","deleted":"true"}}`))
	if want := (snapshot.BlockAffinity{Name: "n-10-0-0-0-30", CIDR: netip.MustParsePrefix("10.0.0.0/30"), Node: "n",
		State: "pendingDeletion", Type: "host", Deleted: true}); !reflect.DeepEqual(a, want) {
		t.Errorf("affinity %+v", a)
	}
	// projectcalico.org/v3 keeps deleted as a boolean.
	if a := Affinity(decode(t, `{"spec":{"cidr":"10.0.0.0/30","node":"n","state":"confirmed","type":"virtual","deleted":true}}`)); !a.Deleted || a.Type != "virtual" || a.Malformed != nil {
		t.Errorf("v3 affinity %+v", a)
	}
	a = Affinity(decode(t, `{"spec":{"cidr":"x","state":"claimed","deleted":"maybe"}}`))
	if want := []string{`cidr "x" is not a CIDR`, "no node", `state "claimed" is none of confirmed, pending, pendingDeletion`,
		`deleted is "maybe", neither true nor false: Calico cannot read the affinity`}; !reflect.DeepEqual(a.Malformed, want) {
		t.Errorf("malformed %q", a.Malformed)
	}

	p := Pool(decode(t, `{"metadata":{"name":"default-ipv6"},"spec":{"cidr":"fd00:10:244::/48","blockSize":122,"disabled":true,
		"nodeSelector":"all()","allowedUses":["Workload","Tunnel"],"ipipMode":"Never"}}`))
	if want := (snapshot.IPPool{Name: "default-ipv6", CIDR: netip.MustParsePrefix("fd00:10:244::/48"), BlockSize: 122, Disabled: true,
		NodeSelector: "all()", AllowedUses: []string{"Workload", "Tunnel"}}); !reflect.DeepEqual(p, want) {
		t.Errorf("pool %+v", p)
	}
	p = Pool(decode(t, `{"spec":{"cidr":"10.0.0.0/16","blockSize":12,"allowedUses":[1]}}`))
	if want := []string{"blockSize 12 does not fit the pool 10.0.0.0/16", "allowedUses[0] is the number 1, not a string"}; !reflect.DeepEqual(p.Malformed, want) {
		t.Errorf("malformed %q", p.Malformed)
	}
}

func TestLeakGC(t *testing.T) {
	kcc := func(name, rest string) map[string]any {
		return decode(t, `{"apiVersion":"crd.projectcalico.org/v1","kind":"KubeControllersConfiguration","metadata":{"name":"`+name+`"}`+rest+`}`)
	}
	for _, tc := range []struct {
		name, rest string
		grace      time.Duration
		from       string
		malformed  []string
	}{
		{"as kube-controllers writes it", `,"spec":{"controllers":{"node":{"leakGracePeriod":"15m0s","syncLabels":"Enabled"}}}`,
			15 * time.Minute, "spec.controllers.node.leakGracePeriod", nil},
		{"what the running controllers report wins", `,"spec":{"controllers":{"node":{"leakGracePeriod":"15m0s"}}},
			"status":{"runningConfig":{"controllers":{"node":{"leakGracePeriod":"5s"}}}}`,
			5 * time.Second, "status.runningConfig.controllers.node.leakGracePeriod", nil},
		// As calicoctl apply stores it before any kube-controllers ran.
		{"an empty runningConfig is no report", `,"spec":{"controllers":{"node":{"leakGracePeriod":"5m"}}},"status":{"runningConfig":{"controllers":{},"logSeverityScreen":""}}`,
			5 * time.Minute, "spec.controllers.node.leakGracePeriod", nil},
		{"node controller off where it runs", `,"spec":{"controllers":{"node":{"leakGracePeriod":"5s"}}},"status":{"runningConfig":{"controllers":{"policy":{}}}}`,
			0, "status.runningConfig.controllers.node is unset: the node controller, which runs the collector, is off", nil},
		{"disabled", `,"spec":{"controllers":{"node":{"leakGracePeriod":"0s"}}}`,
			0, "spec.controllers.node.leakGracePeriod is 0: the collector frees no allocation of a live node", nil},
		{"node controller without a period", `,"spec":{"controllers":{"node":{}}}`,
			0, "spec.controllers.node.leakGracePeriod is unset: the collector frees no allocation of a live node", nil},
		{"unreadable period", `,"spec":{"controllers":{"node":{"leakGracePeriod":"soon"}}}`,
			0, "spec.controllers.node.leakGracePeriod is unreadable", []string{`spec.controllers.node.leakGracePeriod is "soon", not a duration`}},
		{"negative", `,"spec":{"controllers":{"node":{"leakGracePeriod":"-1m"}}}`,
			0, "spec.controllers.node.leakGracePeriod is negative: the collector frees no allocation of a live node",
			[]string{"spec.controllers.node.leakGracePeriod is -1m, negative"}},
		{"controllers not an object", `,"spec":{"controllers":"all"}`,
			0, "spec.controllers.node is unreadable", []string{`spec.controllers.node: controllers is the string "all", not an object`}},
		{"no spec", ``, 0, "no spec: kube-controllers cannot read its configuration", []string{"no spec"}},
	} {
		c := &snapshot.Calico{}
		if !Add(c, kcc("default", tc.rest)) || c.LeakGC == nil {
			t.Fatalf("%s: not read", tc.name)
		}
		want := snapshot.LeakGC{GracePeriod: tc.grace, From: tc.from, Malformed: tc.malformed}
		if !reflect.DeepEqual(*c.LeakGC, want) || c.LeakGracePeriod() != tc.grace {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, *c.LeakGC, want)
		}
	}
	c := &snapshot.Calico{}
	if Add(c, kcc("other", `,"spec":{"controllers":{"node":{"leakGracePeriod":"0s"}}}`)) || c.LeakGC != nil || c.LeakGracePeriod() != snapshot.DefaultLeakGracePeriod {
		t.Errorf("a configuration other than default counts: %+v", c.LeakGC)
	}
}

// Add takes the five kinds in both API versions, and nothing else.
func TestAddKinds(t *testing.T) {
	c := &snapshot.Calico{}
	for _, tc := range []struct {
		apiVersion, kind string
		added            bool
	}{
		{"crd.projectcalico.org/v1", "IPAMBlock", true},
		{"projectcalico.org/v3", "IPAMBlock", true},
		{"crd.projectcalico.org/v1", "IPAMHandle", true},
		{"crd.projectcalico.org/v1", "BlockAffinity", true},
		{"projectcalico.org/v3", "IPPool", true},
		{"crd.projectcalico.org/v1", "IPPool", true},
		{"projectcalico.org/v3", "KubeControllersConfiguration", true},
		{"crd.projectcalico.org/v1", "IPAMConfig", false},
		{"crd.projectcalico.org/v2", "IPAMBlock", false},
		{"v1", "Pod", false},
	} {
		obj := map[string]any{"apiVersion": tc.apiVersion, "kind": tc.kind, "metadata": map[string]any{"name": "default"}, "spec": map[string]any{}}
		if got := Add(c, obj); got != tc.added {
			t.Errorf("%s %s: added %t", tc.apiVersion, tc.kind, got)
		}
	}
	if len(c.Blocks) != 2 || len(c.Handles) != 1 || len(c.Affinities) != 1 || len(c.Pools) != 2 || c.LeakGC == nil {
		t.Errorf("ledger %+v", c)
	}
}
