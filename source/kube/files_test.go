package kube

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

var update = flag.Bool("update", false, "rewrite the testdata/*.golden files")

// dump renders objects one per line, for golden files.
func dump(o *Objects) string {
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

func readFile(t *testing.T, path string) *Objects {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	o, err := ReadObjects(filepath.Base(path), f)
	if err != nil {
		t.Fatalf("ReadObjects(%s): %v", path, err)
	}
	return o
}

func TestReadObjectsGolden(t *testing.T) {
	for _, tc := range []struct{ file, golden string }{
		{"cluster.yaml", "cluster.golden"},
		{"cluster.json", "cluster.golden"}, // the same objects as JSON
		{"multidoc.yaml", "multidoc.golden"},
		{"stream.json", "stream.golden"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			got := dump(readFile(t, filepath.Join("../kubectl/testdata", tc.file)))
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

// TestReadObjectsCluster spells out what the golden file holds for the
// cases the rules depend on.
func TestReadObjectsCluster(t *testing.T) {
	o := readFile(t, "../kubectl/testdata/cluster.yaml")
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
	n, ok := LookupNode(k, "worker-1")
	if !ok || len(n.Addresses) != 3 {
		t.Errorf("worker-1: %+v, want InternalIPs and ExternalIP", n)
	}
	if len(o.Ignored) != 0 {
		t.Errorf("ignored %v", o.Ignored)
	}
}

func TestReadObjectsErrors(t *testing.T) {
	const pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: ns\n"
	for _, tc := range []struct {
		name, in, want string
	}{
		{"yaml syntax", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: [p\n", `f:4: did not find expected ',' or ']'`},
		{"yaml syntax in a later document", pod + "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: q\n  labels:\n    a: b\n   c: d\n",
			`f:12: did not find expected key`},
		{"yaml error deep in a list", "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: a\n  spec:\n    nodeName: w\n    hostNetwork: true\n   x: 1\n",
			`f:10: did not find expected key`},
		{"unclosed flow sequence", pod + "spec:\n  containers: [{name: a},\n  {name: b}\nstatus: {}\n",
			`f:8: did not find expected ',' or ']'`},
		{"tab indentation on the first line", "\tkind: Pod\n", `f:1: found character that cannot start any token`},
		{"control character", pod + "---\nkind: Pod\napiVersion: v1\nmetadata: {name: \"a\x01\"}\n",
			`f:7: control characters are not allowed`},
		{"invalid UTF-8", pod + "spec:\n  nodeName: w\xff\n", `f:1: invalid leading UTF-8 octet`},
		{"no kind", pod + "---\napiVersion: v1\nmetadata: {name: x}\n", `f:7: object has no kind`},
		{"no apiVersion", "kind: Pod\nmetadata: {name: x}\n", `f:1: Pod has no apiVersion`},
		{"kind of the wrong type", "apiVersion: v1\nkind:\n  a: b\n", `f:1: kind: expected a string, found object`},
		{"not an object", "- apiVersion: v1\n  kind: Pod\n", `f:1: not a Kubernetes object: the document is a list`},
		{"scalar document", pod + "---\njust text\n", `f:7: not a Kubernetes object: the document is a scalar`},
		{"wrong type in a field", pod + "spec:\n  hostNetwork: \"yes\"\n", `f:1: Pod ns/p: spec.hostNetwork: expected a boolean, found string`},
		{"wrong type deep in a list", pod + "spec:\n  containers:\n  - name: a\n    ports:\n    - containerPort: 80\n    - containerPort: http\n",
			`f:1: Pod ns/p: spec.containers.ports.containerPort: expected an integer (int32), found string`},
		{"number out of range", "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec:\n  ports:\n  - port: 99999999999\n",
			`f:1: Service s: spec.ports.port: expected an integer (int32), found number 99999999999`},
		{"object where a list belongs", pod + "status:\n  podIPs:\n    ip: 10.0.0.1\n", `f:1: Pod ns/p: status.podIPs: expected a list, found object`},
		{"bad timestamp", pod + "  creationTimestamp: yesterday\n", `f:1: Pod ns/p: parsing time "yesterday" as "2006-01-02T15:04:05Z07:00": cannot parse "yesterday" as "2006"`},
		{"bad quantity", "apiVersion: v1\nkind: Node\nmetadata: {name: w}\nstatus:\n  capacity: {cpu: lots}\n", `f:1: Node w: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'`},
		{"no name", "apiVersion: v1\nkind: Node\nmetadata: {}\n", `f:1: Node has no metadata.name`},
		{"YAML 1.1 boolean", "apiVersion: v1\nkind: Node\nmetadata: {name: n}\n",
			`f:1: metadata.name: expected a string, found bool: quote it, as YAML reads y, n, yes, no, on and off unquoted as booleans`},
		{"number where a string belongs", "apiVersion: v1\nkind: Node\nmetadata: {name: w}\nspec: {podCIDR: 10}\n",
			`f:1: Node w: spec.podCIDR: expected a string, found number: quote it`},
		{"list item without kind", "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: p}\n- metadata: {name: q}\n",
			`f:7: object has no kind`},
		{"items not a list", "apiVersion: v1\nkind: PodList\nitems:\n  a: b\n", `f:1: items is not a list`},
		{"duplicate key", pod + "kind: Service\n", `f:6: key "kind" already set in map`},
		{"infinity", pod + "spec:\n  priority: .inf\n", `f:1: json: unsupported value: +Inf`},
		{"conflicting duplicate", pod + "  resourceVersion: \"1\"\n---\n" + pod + "  resourceVersion: \"2\"\n",
			`f:8: Pod ns/p appears again, with other contents (first at f:1): give each object once`},
		{"directive", pod + "...\n%YAML 1.1\n---\nmetadata: {name: x}\n", `f:9: object has no kind`},
		{"lone CR and LS line breaks", "\n\napiVersion: v1\r\u2028kind: Pod\rmetadata:\r  name: p\nspec:\n  hostNetwork: x\n",
			`f:3: Pod p: spec.hostNetwork: expected a boolean, found string`},
		{"json syntax", "{\n  \"apiVersion\": \"v1\",\n  \"kind\": \"Pod\"\n  \"metadata\": {\"name\": \"p\"}\n}\n",
			`f:4: invalid character '"' after object key:value pair`},
		{"json syntax in the second value", "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\"}}\n\n{\"kind\": x}\n",
			`f:3: invalid character 'x' looking for beginning of value`},
		{"json truncated", "{\"apiVersion\":\"v1\",\n\"kind\":\"List\",\"items\":[\n{\"kind\":\"Pod\"\n", `f:3: unexpected end of JSON input`},
		{"json wrong type", "{\"apiVersion\":\"v1\",\"kind\":\"List\",\"items\":[\n{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\"}},\n{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"q\"},\n \"spec\":{\"nodeName\":5}}]}\n",
			`f:4: Pod q: spec.nodeName: expected a string, found number: quote it`},
		{"json item without kind", "{\"kind\":\"List\",\"items\":[{\"kind\":\"Node\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"n\"}},\n\n  {}]}", `f:3: object has no kind`},
		{"yaml flow mapping, then a YAML error", "{apiVersion: v1, kind: Pod, metadata: {name: p}}\n---\nkind: [\n",
			`f:3: did not find expected node content`},
		{"json array", "[{\"kind\":\"Pod\"}]", `f:1: not a Kubernetes object: a JSON array`},
		{"utf-16 without a BOM is not text", "\x00k\x00i\x00n\x00d", `f:1: control characters are not allowed`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := ReadObjects("f", strings.NewReader(tc.in))
			if err == nil {
				t.Fatalf("no error; read %s", dump(o))
			}
			if err.Error() != tc.want {
				t.Errorf("error:\n got %s\nwant %s", err, tc.want)
			}
		})
	}
}

func TestReadObjectsAccepts(t *testing.T) {
	const want = "pod ns/p uid= node= phase= ips=[] hostNetwork=false created=- started=- deleting=false\n"
	for _, tc := range []struct{ name, in, want string }{
		{"yaml flow mapping", `{apiVersion: v1, kind: Pod, metadata: {name: p, namespace: ns}}`, want},
		{"leading separator and comments", "# hi\n---\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns}\n...\n", want},
		{"UTF-8 byte-order mark", "\xEF\xBB\xBF{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\",\"namespace\":\"ns\"}}", want},
		{"UTF-16 from PowerShell", utf16le("apiVersion: v1\r\nkind: Pod\r\nmetadata:\r\n  name: p\r\n  namespace: ns\r\n"), want},
		{"CRLF line ends", "apiVersion: v1\r\nkind: Pod\r\nmetadata:\r\n  name: p\r\n  namespace: ns\r\n---\r\n", want},
		{"namespace defaults", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n", strings.Replace(want, "ns/p", "default/p", 1)},
		{"merge keys", "apiVersion: v1\nkind: Pod\nmetadata:\n  <<: {name: p}\n  namespace: ns\n", want},
		{"anchors and aliases", "apiVersion: v1\nkind: Pod\nmetadata: {name: &n p, namespace: ns}\nspec: {hostname: *n}\n", want},
		{"unknown fields from newer clusters", "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns}\nspec: {futureField: {a: 1}}\n", want},
		{"exact repeat kept once", "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns, uid: u, resourceVersion: \"7\"}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns, uid: u, resourceVersion: \"7\"}\n",
			strings.Replace(want, "uid=", "uid=u", 1)},
		{"empty", "", ""},
		{"only comments", "# nothing\n---\n# here\n", ""},
		{"empty list", "apiVersion: v1\nkind: List\nitems: []\n", ""},
		{"null items", "{\"apiVersion\":\"v1\",\"kind\":\"PodList\",\"items\":null}", ""},
		{"nested list", "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: PodList\n  items:\n  - metadata: {name: p, namespace: ns}\n", want},
		{"other kinds counted", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\napiVersion: v1\nkind: ConfigMap\n", "ignored v1 ConfigMap: 2\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := ReadObjects("f", strings.NewReader(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if got := dump(o); got != tc.want {
				t.Errorf("got\n%swant\n%s", got, tc.want)
			}
		})
	}
}

func utf16le(s string) string {
	b := []byte{0xFF, 0xFE}
	for _, r := range s {
		b = append(b, byte(r), byte(r>>8))
	}
	return string(b)
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
		src := &FileSource{Paths: []string{pods, rest, again}}
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
		src := &FileSource{Paths: []string{"-", rest}, Stdin: bytes.NewReader(text)}
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
		{"missing kinds", []string{pods, deploys}, pods + ", " + deploys + ": no Service, no EndpointSlice found (ignored: 1 apps/v1 Deployment); save them all with: kubectl get pods,services,endpointslices,nodes,servicecidrs -A -o yaml"},
		{"no paths", nil, "no kube objects file given"},
		{"one namespace", []string{pods, oneNS}, pods + ", " + oneNS + " cannot be the whole cluster: every Pod and Service in them is in namespace ns. Saved with -n instead of -A, they leave out the pods of other namespaces, and an IP one of them holds would read as held by no pod; save them with: kubectl get pods,services,endpointslices,nodes,servicecidrs -A -o yaml"},
		{"a slice lists a pod of a namespace not saved", []string{pods, rest, foreign}, pods + ", " + rest + ", " + foreign + " cannot be the whole cluster: an EndpointSlice of billing/api lists pod billing/api-0, yet they hold no Pod of namespace billing. Saved with -n instead of -A, they leave out the pods of other namespaces, and an IP one of them holds would read as held by no pod; save them with: kubectl get pods,services,endpointslices,nodes,servicecidrs -A -o yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &snapshot.Snapshot{}
			err := (&FileSource{Paths: tc.paths}).Collect(context.Background(), s)
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
		src := &FileSource{Paths: []string{pods, other, deploys}}
		src.Narrow([]any{podsOnly{}})
		s := &snapshot.Snapshot{}
		if err := src.Collect(context.Background(), s); err != nil || len(s.Kube.Pods) != 2 {
			t.Errorf("pods only, read by a rule of pods: %v, %+v", err, s.Kube)
		}
		src.Narrow([]any{podsOnly{}, struct{}{}})
		if err := src.Collect(context.Background(), &snapshot.Snapshot{}); err == nil || !strings.Contains(err.Error(), ": no Service, no EndpointSlice found") {
			t.Errorf("pods only, read by a rule that says nothing: %v", err)
		}
	})
	t.Run("canceled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		s := &snapshot.Snapshot{}
		if err := (&FileSource{Paths: []string{pods, rest}}).Collect(ctx, s); err == nil || s.Kube != nil {
			t.Errorf("Collect after cancel: %v, %+v", err, s.Kube)
		}
	})
}

var errPrefix = regexp.MustCompile(`^fuzz\.yaml:([1-9][0-9]*): `)

func FuzzReadObjects(f *testing.F) {
	for _, name := range []string{"cluster.yaml", "multidoc.yaml", "stream.json"} {
		b, err := os.ReadFile(filepath.Join("../kubectl/testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		"apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {hostNetwork: true}\nstatus: {podIPs: [{ip: 10.0.0.1}]}\n",
		"{\"kind\":\"List\",\"items\":[{\"kind\":\"Node\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"n\"}}]}",
		"a: &x [*x]\n",
		"--- |\n  text\n...\n",
		"{a: 1}\n---\n{b: 2}\n",
		calicoObjects,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		o, err := ReadObjects("fuzz.yaml", bytes.NewReader(data))
		if err != nil {
			m := errPrefix.FindStringSubmatch(err.Error())
			if m == nil {
				t.Fatalf("error does not start with fuzz.yaml:LINE: %q", err)
			}
			line, _ := strconv.Atoi(m[1])
			// UTF-16 input is converted before lines are counted.
			if max := bytes.Count(data, []byte{'\n'}) + 1; line > max && !bytes.HasPrefix(data, []byte{0xFF, 0xFE}) && !bytes.HasPrefix(data, []byte{0xFE, 0xFF}) {
				t.Fatalf("error names line %d of %d: %q", line, max, err)
			}
			return
		}
		if o == nil {
			t.Fatal("nil Objects without an error")
		}
	})
}

// TestReadObjectsListLayouts covers how a list's layout decides whether its
// items are read one at a time: an error in an item names the item's line
// only then; a list read whole names the line of the document.
func TestReadObjectsListLayouts(t *testing.T) {
	const (
		podA = "pod ns/a uid= node= phase= ips=[] hostNetwork=false created=- started=- deleting=false\n"
		podB = "pod ns/b uid= node= phase= ips=[] hostNetwork=false created=- started=- deleting=false\n"
	)
	for _, tc := range []struct{ name, in, want string }{
		{"kubectl layout", "apiVersion: v1\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: a, namespace: ns}\n\n# c\n- metadata: {name: b}\nkind: List\n",
			"error f:8: object has no kind"},
		{"indented items, a comment after the key, no final newline",
			"kind: List\napiVersion: v1\nitems: # pods\n  # first\n  - apiVersion: v1\n    kind: Pod\n    metadata: {name: a, namespace: ns,\n      annotations: {x: z}}\n  - metadata: {name: b}",
			"error f:9: object has no kind"},
		{"typed list, kind first", "apiVersion: v1\nkind: PodList\nitems:\n- metadata: {name: a, namespace: ns}\n- metadata: {name: b, namespace: ns}\n  spec: {hostNetwork: x}\n",
			"error f:5: Pod ns/b: spec.hostNetwork: expected a boolean, found string"},
		{"typed list, kind last", "apiVersion: v1\nitems:\n- metadata: {name: a, namespace: ns}\n- metadata: {name: b, namespace: ns}\nkind: PodList\n", podA + podB},
		{"empty block", "items:\nkind: List\n", ""},
		{"flow items", "apiVersion: v1\nkind: List\nitems: [{apiVersion: v1, kind: Pod, metadata: {name: a, namespace: ns}}, {}]\n",
			"error f:1: object has no kind"},
		{"items of an object that is not a list", "apiVersion: v1\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: a}\nkind: Foo\n", "ignored v1 Foo: 1\n"},
		{"items deeper than the root", "apiVersion: v1\nkind: Foo\nspec:\n  items:\n  - apiVersion: v1\n    kind: Pod\n", "ignored v1 Foo: 1\n"},
		{"items twice", "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: a}\nitems:\n- b\n",
			`error f:8: key "items" already set in map`},
		{"tab indentation", "apiVersion: v1\nkind: List\nitems:\n  - apiVersion: v1\n    kind: Pod\n    metadata: {name: a, namespace: ns, annotations: {x: \"multi\n\tline\"}}\n  - {}\n",
			"error f:1: object has no kind"},
		{"odd indentation", "apiVersion: v1\nkind: List\nitems:\n  - apiVersion: v1\n    kind: Pod\n    metadata: {name: a, namespace: ns, annotations: {x: \"multi\n line\"}}\n  - {}\n",
			"error f:1: object has no kind"},
		{"json, kind last", `{"items":[{"metadata":{"name":"a","namespace":"ns"}},` + "\n" + `{"metadata":{"name":"b","namespace":"ns"}}],"kind":"PodList","apiVersion":"v1"}`, podA + podB},
		{"json, kind last, items of an object that is not a list", `{"apiVersion":"v1","items":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"}}],"kind":"Foo"}`, "ignored v1 Foo: 1\n"},
		{"json, kind first, items of an object that is not a list", `{"apiVersion":"v1","kind":"Foo","items":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"}}]}`, "ignored v1 Foo: 1\n"},
		{"json, items twice", `{"apiVersion":"v1","kind":"List","items":[],` + "\n" + `"items":[]}`, "error f:2: items appears twice"},
		{"json, wrong type in a single object", "{\n \"apiVersion\": \"v1\",\n \"kind\": \"Pod\",\n \"metadata\": {\"name\": \"p\"},\n \"spec\": {\n  \"nodeName\": 5\n }\n}",
			"error f:6: Pod p: spec.nodeName: expected a string, found number: quote it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := ReadObjects("f", strings.NewReader(tc.in))
			got := ""
			if err != nil {
				got = "error " + err.Error()
			} else {
				got = dump(o)
			}
			if got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// TestReadObjectsLargeList covers a list too large to keep whole: it reads
// item by item, and an item that does not read on its own is an error.
func TestReadObjectsLargeList(t *testing.T) {
	defer func(n int) { maxWhole = n }(maxWhole)
	maxWhole = 1 << 20
	var items strings.Builder
	n := 0
	for ; items.Len() <= maxWhole; n++ {
		fmt.Fprintf(&items, "  - apiVersion: v1\n    kind: Pod\n    metadata: {name: p%d, namespace: ns, labels: &l%d {app: a}}\n", n, n)
	}
	lines := strings.Count(items.String(), "\n") + 2
	const bad = "  - apiVersion: v1\n    kind: Pod\n    metadata: {name: q, namespace: ns, labels: *l0}\n"
	for _, tc := range []struct{ name, in, want string }{
		{"kubectl layout", "apiVersion: v1\nitems:\n" + items.String() + "kind: List\n", ""},
		{"alias to another item", "apiVersion: v1\nitems:\n" + items.String() + bad + "kind: List\n",
			fmt.Sprintf("f:%d: unknown anchor 'l0' referenced; a list over 1 MiB is read one item at a time, each on its own: save it again with kubectl get -o yaml", lines+1)},
		{"odd indentation", "apiVersion: v1\nitems:\n" + items.String() + " x: 1\n",
			fmt.Sprintf("f:%d: the items are not laid out as kubectl prints them; a list over 1 MiB is read one item at a time, each on its own: save it again with kubectl get -o yaml", lines+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := ReadObjects("f", strings.NewReader(tc.in))
			if tc.want == "" {
				if err != nil || len(o.Kube.Pods) != n {
					t.Fatalf("read %v, %v; want %d pods", o, err, n)
				}
				return
			}
			if err == nil || err.Error() != tc.want {
				t.Errorf("error:\n got %v\nwant %s", err, tc.want)
			}
		})
	}
}

// TestReadObjectsListFallback covers lists that look like kubectl's layout
// item by item but are only valid YAML as a whole: what was read item by item
// must be rolled back before the document is read again.
func TestReadObjectsListFallback(t *testing.T) {
	const head = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: p, namespace: ns, labels: &l {app: a}}\n  status: {podIP: 10.0.0.1}\n"
	for _, tc := range []struct{ name, in string }{
		{"alias to an earlier item", head + "- apiVersion: v1\n  kind: Pod\n  metadata: {name: q, namespace: ns, labels: *l}\n"},
		{"dash at column 0 inside a quoted string", head + "- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: q\n    namespace: ns\n    annotations:\n      a: \"x\n- y\"\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := ReadObjects("f", strings.NewReader(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if len(o.Kube.Pods) != 2 || o.Kube.Pods[0].Name != "p" || o.Kube.Pods[1].Name != "q" {
				t.Errorf("pods = %+v", o.Kube.Pods)
			}
		})
	}
	// The rollback leaves objects read from earlier documents alone.
	o := &Objects{}
	if err := o.Read("a", strings.NewReader("apiVersion: v1\nkind: ConfigMap\n---\napiVersion: v1\nkind: Node\nmetadata: {name: w}\n")); err != nil {
		t.Fatal(err)
	}
	if err := o.Read("b", strings.NewReader(head+"- apiVersion: v1\n  kind: ConfigMap\n  data: *l\n")); err != nil {
		t.Fatal(err)
	}
	if got := dump(o); got != "pod ns/p uid= node= phase= ips=[10.0.0.1] hostNetwork=false created=- started=- deleting=false\nnode w []\nignored v1 ConfigMap: 2\n" {
		t.Errorf("after rollback and reread:\n%s", got)
	}
}

func BenchmarkReadObjectsList(b *testing.B) {
	src, err := os.ReadFile("../kubectl/testdata/cluster.yaml")
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

// podsOnly is a rule that reads Pods only.
type podsOnly struct{}

func (podsOnly) KubeKinds() []string { return []string{"Pod"} }
