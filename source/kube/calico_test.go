package kube

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/calico"
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

func TestReadCalicoObjects(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	objs := write("calico.yaml", calicoObjects)
	pool := write("pool.yaml", calicoctlPool)
	o := readFile(t, objs)
	if o.Ignored["crd.projectcalico.org/v1 KubeControllersConfiguration"] != 1 || len(o.Kube.Pods) != 2 {
		t.Errorf("ignored %v, pods %d", o.Ignored, len(o.Kube.Pods))
	}

	src := &FileSource{Paths: []string{objs, pool, objs}}
	src.Narrow([]any{calicoReader{}})
	s := &snapshot.Snapshot{}
	if err := src.Collect(context.Background(), s); err != nil {
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
	s = &snapshot.Snapshot{}
	if err := src.collectFiles(s, j); err != nil {
		t.Fatal(err)
	}
	if b := s.Calico.Blocks[0]; b.SequenceNumber != 1795456171884406479 || b.Allocations[0].SequenceNumber != 1795456171884406478 || b.Malformed != nil {
		t.Errorf("from JSON: %+v", b)
	}
}

func (f *FileSource) collectFiles(s *snapshot.Snapshot, paths ...string) error {
	f.Paths = paths
	return f.Collect(context.Background(), s)
}

// calicoReader is a rule that reads Calico's blocks only.
type calicoReader struct{}

func (calicoReader) KubeKinds() []string { return []string{calico.KindIPAMBlock} }

func TestReadCalicoObjectsErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	block := func(rv, spec string) string {
		return "apiVersion: crd.projectcalico.org/v1\nkind: IPAMBlock\nmetadata: {name: b, uid: u, resourceVersion: \"" + rv + "\"}\nspec: " + spec + "\n"
	}
	pods := write("pods.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns, uid: u1}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: q, namespace: kube-system, uid: u2}\n")

	// What Calico wrote wrong is the ledger's business, not an error.
	bad := write("bad.yaml", block("1", `{cidr: 10.0.0.0/30, allocations: [7], unallocated: [], attributes: []}`))
	src := &FileSource{}
	src.Narrow([]any{calicoReader{}})
	s := &snapshot.Snapshot{}
	if err := src.collectFiles(s, bad); err != nil {
		t.Fatal(err)
	}
	if b := s.Calico.Blocks[0]; len(b.Malformed) != 2 || len(b.Allocations) != 1 {
		t.Errorf("malformed block %+v", b)
	}

	// No Calico object: no ledger.
	s = &snapshot.Snapshot{}
	src.Narrow([]any{podsOnly{}})
	if err := src.collectFiles(s, pods); err != nil || s.Calico != nil {
		t.Errorf("without Calico objects: %v, %+v", err, s.Calico)
	}

	for _, tc := range []struct {
		name  string
		paths []string
		want  string
	}{
		{"changed block", []string{bad, write("changed.yaml", block("2", `{cidr: 10.0.0.0/30}`))},
			filepath.Join(dir, "changed.yaml") + ":1: IPAMBlock b appears again, with other contents (first at " + bad + ":1): give each object once"},
		{"unnamed", []string{write("unnamed.yaml", "apiVersion: projectcalico.org/v3\nkind: IPPool\nspec: {cidr: 10.0.0.0/8}\n")},
			filepath.Join(dir, "unnamed.yaml") + ":1: IPPool has no metadata.name"},
		{"metadata of the wrong type", []string{write("uid.yaml", "apiVersion: crd.projectcalico.org/v1\nkind: IPAMHandle\nmetadata: {name: h, uid: 7}\n")},
			filepath.Join(dir, "uid.yaml") + ":1: IPAMHandle h: metadata.uid: expected a string, found number: quote it"},
		{"blocks missing", []string{pods},
			pods + ": no IPAMBlock found; save them all with: " + SaveCommand + ", and Calico's with: " + calico.SaveCommand},
	} {
		src.Narrow([]any{calicoReader{}})
		s := &snapshot.Snapshot{}
		err := src.collectFiles(s, tc.paths...)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s:\n got %v\nwant %s", tc.name, err, tc.want)
		}
		if s.Calico != nil || s.Kube != nil {
			t.Errorf("%s: Collect set the snapshot despite the error", tc.name)
		}
	}
}

// Items read before their list's kind are forgotten when the object is no
// list after all: Calico's with the others.
func TestReadCalicoObjectsRollback(t *testing.T) {
	in := `{"items":[{"apiVersion":"crd.projectcalico.org/v1","kind":"IPAMBlock","metadata":{"name":"b"},"spec":{}}],
"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"}}`
	o, err := ReadObjects("d.json", strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Calico.Blocks) != 0 || o.sawCalico() || o.Ignored["apps/v1 Deployment"] != 1 {
		t.Errorf("blocks %+v, ignored %v", o.Calico.Blocks, o.Ignored)
	}
}
