package saved

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/kube"
	"github.com/ghostwatch/ghostwatch/source/kubectl"
)

var update = flag.Bool("update", false, "rewrite the testdata/*.golden files")

// inputs is where kubectl's outputs the tests read are: with the package
// that reads them.
const inputs = "../../kubectl/testdata"

// saved is what the ledger read of saved objects.
type saved struct {
	Kube    snapshot.Kube
	Ignored map[string]int
}

// dump renders objects one per line, for golden files.
func dump(o *saved) string {
	var b strings.Builder
	ts := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Format(time.RFC3339)
	}
	for _, p := range o.Kube.Pods {
		fmt.Fprintf(&b, "pod %s uid=%s node=%s phase=%s ips=%v hostNetwork=%v created=%s started=%s deleting=%v\n",
			p.Ref(), p.UID, p.Node, p.Phase, p.IPs, p.HostNetwork, ts(p.Created), ts(p.StartTime), p.Deleting)
	}
	for _, s := range o.Kube.Services {
		var ports []string
		for _, p := range s.Ports {
			ports = append(ports, fmt.Sprintf("%s/%s:%d->%d", p.Name, p.Protocol, p.Port, p.NodePort))
		}
		fmt.Fprintf(&b, "service %s type=%s clusterIPs=%v externalIPs=%v lbIPs=%v ports=%v\n",
			s.Ref(), s.Type, s.ClusterIPs, s.ExternalIPs, s.LoadBalancerIPs, ports)
	}
	for _, e := range o.Kube.Endpoints {
		pod := "-"
		if e.Pod != nil {
			pod = e.Pod.String()
		}
		fmt.Fprintf(&b, "endpoint %s slice=%s %s ready=%v serving=%v terminating=%v pod=%s node=%s\n",
			e.Service, e.Slice, e.Address, e.Ready, e.Serving, e.Terminating, pod, e.Node)
	}
	for _, n := range o.Kube.Nodes {
		fmt.Fprintf(&b, "node %s %v\n", n.Name, n.Addresses)
	}
	var ig []string
	for k, n := range o.Ignored {
		ig = append(ig, fmt.Sprintf("ignored %s: %d\n", k, n))
	}
	sort.Strings(ig)
	b.WriteString(strings.Join(ig, ""))
	return b.String()
}

// ReadObjects reads what r holds of the ledger, as FileSource does, but
// without the checks of a whole cluster.
func ReadObjects(name string, r io.Reader) (*saved, error) {
	objs := &kubectl.Objects{}
	keepSaved(objs)
	if err := objs.Read(name, r); err != nil {
		return nil, err
	}
	return &saved{Kube: savedLedger(objs), Ignored: objs.Ignored}, nil
}

func readFile(t *testing.T, path string) *saved {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	o, err := ReadObjects(filepath.Base(path), f)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	return o
}

// TestReadSavedGolden reads kubectl's outputs into the ledger.
func TestReadSavedGolden(t *testing.T) {
	for _, tc := range []struct{ file, golden string }{
		{"cluster.yaml", "cluster.golden"},
		{"cluster.json", "cluster.golden"}, // the same objects as JSON
		{"multidoc.yaml", "multidoc.golden"},
		{"stream.json", "stream.golden"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			got := dump(readFile(t, filepath.Join(inputs, tc.file)))
			golden := filepath.Join("testdata", tc.golden)
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("%s differs from %s:\n--- got\n%s--- want\n%s", tc.file, tc.golden, got, want)
			}
		})
	}
}

// TestReadSavedCluster spells out what the golden file holds for the
// cases the rules depend on.
func TestReadSavedCluster(t *testing.T) {
	o := readFile(t, filepath.Join(inputs, "cluster.yaml"))
	k := &o.Kube
	if len(k.Pods) != 8 || len(k.Services) != 7 || len(k.Nodes) != 3 {
		t.Fatalf("read %d pods, %d services, %d nodes; want 8, 7, 3", len(k.Pods), len(k.Services), len(k.Nodes))
	}
	pods := map[string]snapshot.Pod{}
	for _, p := range k.Pods {
		pods[p.Ref().String()] = p
	}
	if p := pods["kube-system/kube-proxy-8xkzp"]; !p.HostNetwork || !p.HasIP(netip.MustParseAddr("192.168.50.11")) {
		t.Errorf("kube-proxy: %+v, want host network on 192.168.50.11", p)
	}
	if p := pods["web/api-5f4c3b2a19-9z8wq"]; !p.Deleting || p.Terminal() {
		t.Errorf("terminating pod: %+v, want Deleting and not terminal", p)
	}
	if p := pods["batch/report-29389230-x7k2p"]; !p.Terminal() || !p.HasIP(netip.MustParseAddr("10.244.2.41")) {
		t.Errorf("completed job pod: %+v, want terminal still showing its IP", p)
	}
	if p := pods["web/api-5f4c3b2a19-evct9"]; p.Phase != snapshot.PodFailed {
		t.Errorf("evicted pod: %+v", p)
	}
	if p := pods["db/postgres-1"]; len(p.IPs) != 0 || !p.StartTime.IsZero() || p.Since() != time.Date(2026, 11, 22, 12, 0, 7, 0, time.UTC) {
		t.Errorf("unscheduled pod: %+v", p)
	}
	if p := pods["web/api-7c9d8f5b6d-2xkqp"]; len(p.IPs) != 2 || !p.HasIP(netip.MustParseAddr("fd00:10:244:1::21")) {
		t.Errorf("dual-stack pod: %+v", p)
	}
	svcs := map[string]snapshot.Service{}
	for _, s := range k.Services {
		svcs[s.Ref().String()] = s
	}
	if s := svcs["db/postgres-headless"]; len(s.ClusterIPs) != 0 || len(s.Ports) != 1 {
		t.Errorf("headless: %+v", s)
	}
	if s := svcs["web/api-public"]; s.Type != snapshot.ServiceLoadBalancer || len(s.LoadBalancerIPs) != 1 ||
		len(s.Ports) != 2 || s.Ports[1].Protocol != snapshot.ProtoUDP || s.Ports[1].NodePort != 31443 {
		t.Errorf("load balancer: %+v", s)
	}
	if s := svcs["web/api-dual"]; len(s.ClusterIPs) != 2 || !s.ClusterIPs[1].Is6() {
		t.Errorf("dual-stack service: %+v", s)
	}
	if s := svcs["web/legacy"]; len(s.ExternalIPs) != 2 {
		t.Errorf("external IPs: %+v", s)
	}
	var api []snapshot.Endpoint
	slices := map[string]bool{}
	for _, e := range k.Endpoints {
		if e.Service.String() == "web/api" {
			api = append(api, e)
			slices[e.Slice] = true
		}
		if e.Slice == "legacy-manual" {
			t.Errorf("a slice without a service-name label became an endpoint: %+v", e)
		}
	}
	if len(api) != 3 || len(slices) != 2 {
		t.Fatalf("web/api endpoints: %+v; want 3 from 2 slices", api)
	}
	if e := api[1]; e.Address != netip.MustParseAddr("10.244.1.22") || e.Ready || !e.Serving || !e.Terminating {
		t.Errorf("draining endpoint: %+v", e)
	}
	n, ok := kube.LookupNode(k, "worker-1")
	if !ok || len(n.Addresses) != 3 {
		t.Errorf("worker-1: %+v, want InternalIPs and ExternalIP", n)
	}
	if len(o.Ignored) != 0 {
		t.Errorf("ignored %v", o.Ignored)
	}
}

func TestReadServiceCIDRObjects(t *testing.T) {
	in := `apiVersion: v1
kind: List
items:
- apiVersion: networking.k8s.io/v1
  kind: ServiceCIDR
  metadata: {name: kubernetes, uid: u1, resourceVersion: "1"}
  spec:
    cidrs: [10.96.0.0/16, "fd00:10:96::/112", bogus]
`
	o, err := ReadObjects("objs.yaml", strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("fd00:10:96::/112")}
	if len(o.Kube.ServiceCIDRs) != 1 || o.Kube.ServiceCIDRs[0].Name != "kubernetes" || len(o.Kube.ServiceCIDRs[0].CIDRs) != 2 ||
		o.Kube.ServiceCIDRs[0].CIDRs[0] != want[0] || o.Kube.ServiceCIDRs[0].CIDRs[1] != want[1] || len(o.Ignored) != 0 {
		t.Fatalf("read %+v, ignored %v", o.Kube.ServiceCIDRs, o.Ignored)
	}
}

func TestFileSource(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pods := write("pods.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns, uid: u1, resourceVersion: \"1\"}\nstatus: {podIP: 10.244.0.5}\n")
	rest := write("rest.json", `{"apiVersion":"v1","kind":"List","items":[
 {"apiVersion":"v1","kind":"Service","metadata":{"name":"s","namespace":"ns"},"spec":{"clusterIP":"10.96.0.5"}},
 {"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"s-1","namespace":"ns","labels":{"kubernetes.io/service-name":"s"}},"addressType":"IPv4","endpoints":[{"addresses":["10.244.0.5"]}]},
 {"apiVersion":"v1","kind":"Service","metadata":{"name":"kube-dns","namespace":"kube-system"},"spec":{"clusterIP":"10.96.0.10"}},
 {"apiVersion":"v1","kind":"Node","metadata":{"name":"w"}}]}`)
	// rest.json without kube-dns: everything in namespace ns.
	oneNS := write("onens.json", `{"apiVersion":"v1","kind":"List","items":[
 {"apiVersion":"v1","kind":"Service","metadata":{"name":"s","namespace":"ns"},"spec":{"clusterIP":"10.96.0.5"}},
 {"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"s-1","namespace":"ns","labels":{"kubernetes.io/service-name":"s"}},"addressType":"IPv4","endpoints":[{"addresses":["10.244.0.5"]}]}]}`)
	// An EndpointSlice of namespace billing, whose pods were not saved.
	foreign := write("foreign.yaml", "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: api-1, namespace: billing, labels: {kubernetes.io/service-name: api}}\naddressType: IPv4\nendpoints:\n- addresses: [10.244.9.9]\n  targetRef: {kind: Pod, namespace: billing, name: api-0}\n")
	again := write("again.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns, uid: u1, resourceVersion: \"1\"}\n")
	changed := write("changed.yaml", "\napiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns, uid: u1, resourceVersion: \"2\"}\n")
	deploys := write("deploys.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n")
	bad := write("bad.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: [\n")

	t.Run("merge", func(t *testing.T) {
		s := &snapshot.Snapshot{}
		src := newFileSource([]string{pods, rest, again}, nil)
		if src.Name() != "kube" {
			t.Errorf("Name() = %q", src.Name())
		}
		if err := src.Collect(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		k := s.Kube
		if k == nil || len(k.Pods) != 1 || len(k.Services) != 2 || len(k.Endpoints) != 1 || len(k.Nodes) != 1 {
			t.Fatalf("Kube = %+v", k)
		}
	})
	t.Run("stdin", func(t *testing.T) {
		s := &snapshot.Snapshot{}
		text, _ := os.ReadFile(pods)
		src := newFileSource([]string{"-", rest}, bytes.NewReader(text))
		if err := src.Collect(context.Background(), s); err != nil || len(s.Kube.Pods) != 1 {
			t.Fatalf("Collect: %v, %+v", err, s.Kube)
		}
	})
	for _, tc := range []struct {
		name  string
		paths []string
		want  string
	}{
		{"missing file", []string{pods, filepath.Join(dir, "nope.yaml")}, "kube objects file " + filepath.Join(dir, "nope.yaml") + " does not exist; save one with: kubectl get pods,services,endpointslices,nodes,servicecidrs -A -o yaml > FILE"},
		{"syntax error", []string{pods, bad}, bad + ":3: did not find expected node content"},
		{"changed object", []string{pods, rest, changed}, changed + ":2: Pod ns/p appears again, with other contents (first at " + pods + ":1): give each object once"},
		{"none of the kinds", []string{deploys}, deploys + ": no Pod, no Service, no EndpointSlice found (ignored: 1 apps/v1 Deployment); save them all with: kubectl get pods,services,endpointslices,nodes,servicecidrs -A -o yaml"},
		{"no paths", nil, "no kube objects file given"},
		{"one namespace", []string{pods, oneNS}, pods + ", " + oneNS + " cannot be the whole cluster: every Pod and Service in them is in namespace ns. Saved with -n instead of -A, they leave out the pods of other namespaces, and an IP one of them holds would read as held by no pod; save them with: kubectl get pods,services,endpointslices,nodes,servicecidrs -A -o yaml"},
		{"a slice lists a pod of a namespace not saved", []string{pods, rest, foreign}, pods + ", " + rest + ", " + foreign + " cannot be the whole cluster: an EndpointSlice of billing/api lists pod billing/api-0, yet they hold no Pod of namespace billing. Saved with -n instead of -A, they leave out the pods of other namespaces, and an IP one of them holds would read as held by no pod; save them with: kubectl get pods,services,endpointslices,nodes,servicecidrs -A -o yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &snapshot.Snapshot{}
			err := (newFileSource(tc.paths, nil)).Collect(context.Background(), s)
			if err == nil || err.Error() != tc.want {
				t.Errorf("error:\n got %v\nwant %s", err, tc.want)
			}
			if s.Kube != nil {
				t.Errorf("Collect set Kube despite the error")
			}
		})
	}
	// Pods are all a rule of pods needs; a rule of flows still needs the
	// rest, and so does one that says nothing.
	t.Run("kinds the rules read", func(t *testing.T) {
		other := write("pods-kube-system.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: q, namespace: kube-system, uid: u9}\n")
		src := newFileSource([]string{pods, other, deploys}, nil)
		src.Narrow([]any{podsOnly{}})
		s := &snapshot.Snapshot{}
		if err := src.Collect(context.Background(), s); err != nil || len(s.Kube.Pods) != 2 {
			t.Errorf("pods only, read by a rule of pods: %v, %+v", err, s.Kube)
		}
		// The files are read once; what they must hold is checked anew:
		// the kinds they lack are said, and the rules that read them are
		// not judged (rule.Run).
		src.Narrow([]any{podsOnly{}, struct{}{}})
		s = &snapshot.Snapshot{}
		if err := src.Collect(context.Background(), s); err != nil || !slices.Equal(s.Kube.Missing, []string{"Service", "EndpointSlice"}) || len(s.Kube.Pods) != 2 {
			t.Errorf("pods only, read by a rule that says nothing: %v, %+v", err, s.Kube)
		}
	})
	t.Run("canceled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		s := &snapshot.Snapshot{}
		if err := newFileSource([]string{pods, rest}, nil).Collect(ctx, s); err == nil || s.Kube != nil {
			t.Errorf("Collect after cancel: %v, %+v", err, s.Kube)
		}
	})
}

func BenchmarkReadSaved(b *testing.B) {
	src, err := os.ReadFile(filepath.Join(inputs, "cluster.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	i := bytes.Index(src, []byte("items:\n")) + len("items:\n")
	j := bytes.LastIndex(src, []byte("kind: List"))
	var buf bytes.Buffer
	buf.WriteString("apiVersion: v1\nitems:\n")
	for n := range 100 {
		buf.Write(bytes.ReplaceAll(src[i:j], []byte("    name: "), fmt.Appendf(nil, "    name: c%d-", n)))
	}
	buf.WriteString("kind: List\n")
	b.SetBytes(int64(buf.Len()))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ReadObjects("bench", bytes.NewReader(buf.Bytes())); err != nil {
			b.Fatal(err)
		}
	}
}

func newFileSource(paths []string, stdin io.Reader) *FileSource {
	return NewFileSource(&kubectl.Files{Paths: paths, Stdin: stdin})
}

// podsOnly is a rule that reads Pods only.
type podsOnly struct{}

func (podsOnly) KubeKinds() []string { return []string{"Pod"} }
