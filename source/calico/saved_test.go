package calico

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/kubectl"
)

// calicoObjects is what kubectl get ipamblocks.crd.projectcalico.org,... -o
// yaml prints, less the metadata that changes from run to run, with a pod
// among them and a KubeControllersConfiguration kube-controllers does not
// read.
const calicoObjects = `apiVersion: v1
items:
- apiVersion: crd.projectcalico.org/v1
  kind: IPAMBlock
  metadata:
    annotations:
      projectcalico.org/metadata: '{"creationTimestamp":null}'
    name: 10-244-0-0-30
    resourceVersion: "230"
    uid: 816ccb31-0000-4000-8000-000000000001
  spec:
    affinity: host:node-a
    allocations:
    - 0
    - null
    - null
    - null
    attributes:
    - handle_id: k8s-pod-network.8effe9b9c08658aef57b3d02e933426405ea15878d70a1cb0880d2f6f7b1e44d
      secondary:
        namespace: default
        node: node-a
        pod: misbooked
        timestamp: 2026-11-23 17:49:31.768271843 +0000 UTC
    cidr: 10.244.0.0/30
    deleted: false
    sequenceNumber: 1795456171884406479
    sequenceNumberForAllocation:
      "0": 1795456171884406478
    strictAffinity: false
    unallocated:
    - 1
    - 2
    - 3
- apiVersion: crd.projectcalico.org/v1
  kind: IPAMHandle
  metadata:
    name: k8s-pod-network.8effe9b9c08658aef57b3d02e933426405ea15878d70a1cb0880d2f6f7b1e44d
    resourceVersion: "229"
    uid: 816ccb31-0000-4000-8000-000000000002
  spec:
    block:
      10.244.0.0/30: 1
    deleted: false
    handleID: k8s-pod-network.8effe9b9c08658aef57b3d02e933426405ea15878d70a1cb0880d2f6f7b1e44d
- apiVersion: crd.projectcalico.org/v1
  kind: BlockAffinity
  metadata:
    name: node-a-10-244-0-0-30
    resourceVersion: "228"
    uid: 816ccb31-0000-4000-8000-000000000003
  spec:
    cidr: 10.244.0.0/30
    deleted: "false"
    node: node-a
    state: confirmed
    type: host
- apiVersion: crd.projectcalico.org/v1
  kind: IPPool
  metadata:
    name: node-a
    resourceVersion: "200"
    uid: 816ccb31-0000-4000-8000-000000000004
  spec:
    allowedUses:
    - Workload
    - Tunnel
    blockSize: 30
    cidr: 10.244.0.0/30
    ipipMode: Never
    nodeSelector: kubernetes.io/hostname == 'node-a'
    vxlanMode: Never
- apiVersion: crd.projectcalico.org/v1
  kind: KubeControllersConfiguration
  metadata:
    name: default
    resourceVersion: "201"
    uid: 816ccb31-0000-4000-8000-000000000005
  spec:
    controllers:
      node:
        leakGracePeriod: 5s
    logSeverityScreen: Info
- apiVersion: crd.projectcalico.org/v1
  kind: KubeControllersConfiguration
  metadata:
    name: spare
  spec:
    controllers: {}
- apiVersion: v1
  kind: Pod
  metadata: {name: misbooked, namespace: default, uid: p1, resourceVersion: "300"}
  spec: {nodeName: node-b}
  status: {phase: Running, podIP: 10.244.0.0}
- apiVersion: v1
  kind: Pod
  metadata: {name: coredns, namespace: kube-system, uid: p2, resourceVersion: "301"}
kind: List
metadata:
  resourceVersion: ""
`

// A pool as calicoctl get ippools -o yaml prints it: projectcalico.org/v3,
// the same spec.
const calicoctlPool = `apiVersion: projectcalico.org/v3
kind: IPPool
metadata:
  name: node-b
  resourceVersion: "202"
  uid: 5e0c0f57-0000-4000-8000-000000000006
spec:
  blockSize: 30
  cidr: 10.244.0.4/30
  disabled: true
  nodeSelector: kubernetes.io/hostname == 'node-b'
`

// collect runs a FileSource of paths into a snapshot in which the kube
// source, which runs before it, read the cluster.
func collect(paths ...string) (*snapshot.Snapshot, error) {
	s := &snapshot.Snapshot{Kube: &snapshot.Kube{}}
	return s, NewFileSource(&kubectl.Files{Paths: paths}).Collect(context.Background(), s)
}

func writer(t *testing.T) func(name, text string) string {
	dir := t.TempDir()
	return func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
}

func TestReadSaved(t *testing.T) {
	write := writer(t)
	objs := write("calico.yaml", calicoObjects)
	pool := write("pool.yaml", calicoctlPool)

	// The pods are the kube ledger's; the KubeControllersConfiguration
	// that is not "default" no one reads.
	o := &kubectl.Objects{}
	keepSaved(o)
	if err := o.Read("calico.yaml", strings.NewReader(calicoObjects)); err != nil {
		t.Fatal(err)
	}
	if o.Ignored["crd.projectcalico.org/v1 KubeControllersConfiguration"] != 1 || o.Ignored["v1 Pod"] != 2 || len(o.Kept) != 5 {
		t.Errorf("ignored %v, kept %d", o.Ignored, len(o.Kept))
	}

	// The same objects twice, and a pool as calicoctl prints it.
	s, err := collect(objs, pool, objs)
	if err != nil {
		t.Fatal(err)
	}
	c := s.Calico
	if c == nil || len(c.Blocks) != 1 || len(c.Handles) != 1 || len(c.Affinities) != 1 || len(c.Pools) != 2 || c.LeakGC == nil {
		t.Fatalf("Calico = %+v", c)
	}
	b := c.Blocks[0]
	a := b.Allocations
	// The sequence numbers are exact, though beyond 2^53.
	if b.Malformed != nil || b.SequenceNumber != 1795456171884406479 || len(a) != 1 || a[0].SequenceNumber != 1795456171884406478 ||
		a[0].IP != netip.MustParseAddr("10.244.0.0") || a[0].Node != "node-a" || a[0].Pod != "misbooked" ||
		!a[0].Timestamp.Equal(time.Date(2026, 11, 23, 17, 49, 31, 768271843, time.UTC)) || len(b.Free) != 3 {
		t.Errorf("block %+v", b)
	}
	if p := c.Pools; p[0].Name != "node-a" || p[0].BlockSize != 30 || p[0].Disabled || p[1].Name != "node-b" || !p[1].Disabled ||
		p[1].CIDR != netip.MustParsePrefix("10.244.0.4/30") {
		t.Errorf("pools %+v", p)
	}
	if c.LeakGracePeriod() != 5*time.Second || c.Affinities[0].Deleted || c.Handles[0].Blocks[0].Count != 1 {
		t.Errorf("ledger %+v", c)
	}

	// The same objects as JSON.
	j := write("calico.json", `{"apiVersion":"v1","kind":"List","items":[
 {"apiVersion":"crd.projectcalico.org/v1","kind":"IPAMBlock","metadata":{"name":"10-244-0-0-30"},"spec":{"cidr":"10.244.0.0/30",
  "allocations":[0,null,null,null],"unallocated":[1,2,3],"attributes":[{"handle_id":"h","secondary":{"node":"node-a"}}],
  "sequenceNumber":1795456171884406479,"sequenceNumberForAllocation":{"0":1795456171884406478}}}]}`)
	if s, err = collect(j); err != nil {
		t.Fatal(err)
	}
	if b := s.Calico.Blocks[0]; b.SequenceNumber != 1795456171884406479 || b.Allocations[0].SequenceNumber != 1795456171884406478 || b.Malformed != nil {
		t.Errorf("from JSON: %+v", b)
	}
}

func TestReadSavedErrors(t *testing.T) {
	write := writer(t)
	block := func(rv, spec string) string {
		return "apiVersion: crd.projectcalico.org/v1\nkind: IPAMBlock\nmetadata: {name: b, uid: u, resourceVersion: \"" + rv + "\"}\nspec: " + spec + "\n"
	}
	pods := write("pods.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns, uid: u1}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: q, namespace: kube-system, uid: u2}\n")

	// What Calico wrote wrong is the ledger's business, not an error.
	bad := write("bad.yaml", block("1", `{cidr: 10.0.0.0/30, allocations: [7], unallocated: [], attributes: []}`))
	s, err := collect(bad)
	if err != nil {
		t.Fatal(err)
	}
	if b := s.Calico.Blocks[0]; len(b.Malformed) != 2 || len(b.Allocations) != 1 {
		t.Errorf("malformed block %+v", b)
	}

	for _, tc := range []struct {
		name  string
		paths []string
		want  string
	}{
		{"changed block", []string{bad, write("changed.yaml", block("2", `{cidr: 10.0.0.0/30}`))},
			write("changed.yaml", block("2", `{cidr: 10.0.0.0/30}`)) + ":1: IPAMBlock b appears again, with other contents (first at " + bad + ":1): give each object once"},
		{"unnamed", []string{write("unnamed.yaml", "apiVersion: projectcalico.org/v3\nkind: IPPool\nspec: {cidr: 10.0.0.0/8}\n")},
			write("unnamed.yaml", "apiVersion: projectcalico.org/v3\nkind: IPPool\nspec: {cidr: 10.0.0.0/8}\n") + ":1: IPPool has no metadata.name"},
		{"metadata of the wrong type", []string{write("uid.yaml", "apiVersion: crd.projectcalico.org/v1\nkind: IPAMHandle\nmetadata: {name: h, uid: 7}\n")},
			write("uid.yaml", "apiVersion: crd.projectcalico.org/v1\nkind: IPAMHandle\nmetadata: {name: h, uid: 7}\n") + ":1: IPAMHandle h: metadata.uid: expected a string, found number: quote it"},
		// No Calico object: no ledger, as on a cluster without Calico.
		{"no Calico object", []string{pods}, "no Calico in the saved objects: no Calico IPAM object, and no calico-node pod"},
	} {
		s, err := collect(tc.paths...)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s:\n got %v\nwant %s", tc.name, err, tc.want)
		}
		if s.Calico != nil {
			t.Errorf("%s: Collect set the ledger despite the error", tc.name)
		}
	}
}

// The source's status: the ledger's rules are skipped when the files hold
// none of it, as on a cluster without Calico, and fail when the kube source
// found the files unreadable, or not the whole cluster.
func TestFileSource(t *testing.T) {
	write := writer(t)
	objs := write("calico.yaml", calicoObjects)
	for _, tc := range []struct {
		name   string
		s      *snapshot.Snapshot
		paths  []string
		status snapshot.SourceStatus
	}{
		{"ledger read", &snapshot.Snapshot{Kube: &snapshot.Kube{}}, []string{objs},
			snapshot.SourceStatus{Name: Name, Status: snapshot.StatusOK, Detail: "1 block (1 allocation), 1 handle, 1 affinity, 1 pool, leak grace period 5s"}},
		{"no Calico object", &snapshot.Snapshot{Kube: &snapshot.Kube{}}, []string{write("pods.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")},
			snapshot.SourceStatus{Name: Name, Status: snapshot.StatusUnsupported, Detail: "no Calico in the saved objects: no Calico IPAM object, and no calico-node pod"}},
		// The hint to save the ledger only where Calico runs.
		{"no Calico object, calico-node running", &snapshot.Snapshot{Kube: &snapshot.Kube{Pods: []snapshot.Pod{{Namespace: "calico-system", Name: "calico-node-x7k2p"}}}},
			[]string{write("pods.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")},
			snapshot.SourceStatus{Name: Name, Status: snapshot.StatusUnsupported, Detail: "the saved objects hold no Calico IPAM object, though Calico runs in the cluster; save them with: " + SaveCommand}},
		{"kube source failed", &snapshot.Snapshot{}, []string{objs},
			snapshot.SourceStatus{Name: Name, Status: snapshot.StatusError, Detail: "the saved objects could not be read (see the kube source)"}},
	} {
		src := NewFileSource(&kubectl.Files{Paths: tc.paths})
		source.CollectInto(context.Background(), func() time.Time { return time.Time{} }, tc.s, src)
		if st, _ := tc.s.Source(Name); st != tc.status {
			t.Errorf("%s: status %+v, want %+v", tc.name, st, tc.status)
		}
	}
}

// Items read before their list's kind are forgotten when the object is no
// list after all.
func TestReadSavedRollback(t *testing.T) {
	in := `{"items":[{"apiVersion":"crd.projectcalico.org/v1","kind":"IPAMBlock","metadata":{"name":"b"},"spec":{}}],
"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"}}`
	o := &kubectl.Objects{}
	keepSaved(o)
	if err := o.Read("d.json", strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	if c := savedLedger(o); c != nil || o.Saw(KindIPAMBlock) || o.Ignored["apps/v1 Deployment"] != 1 {
		t.Errorf("ledger %+v, ignored %v", c, o.Ignored)
	}
}
