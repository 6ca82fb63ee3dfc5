package kubectl

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

var update = flag.Bool("update", false, "rewrite the testdata/*.golden files")

// typed keeps the kinds the kube ledger reads, each decoded into its API
// type (so that Decode's errors are those of a real ledger), as one line
// that names the object and where it was read.
func typed(o *Objects) {
	kind := func(apiVersion, kind string, namespaced bool, newObj func() any) {
		o.Keep(func(obj *Object) (any, error) {
			if err := obj.Decode(newObj()); err != nil {
				return nil, err
			}
			return fmt.Sprintf("%s %s uid=%s rv=%s at %s", obj.Kind, ref(obj.Namespace, obj.Name), obj.UID, obj.ResourceVersion, obj.Where()), nil
		}, Kind{APIVersion: apiVersion, Kind: kind, Namespaced: namespaced})
	}
	kind("v1", "Pod", true, func() any { return &corev1.Pod{} })
	kind("v1", "Service", true, func() any { return &corev1.Service{} })
	kind("discovery.k8s.io/v1", "EndpointSlice", true, func() any { return &discoveryv1.EndpointSlice{} })
	kind("v1", "Node", false, func() any { return &corev1.Node{} })
	kind("networking.k8s.io/v1", "ServiceCIDR", false, func() any { return &networkingv1.ServiceCIDR{} })
}

func read(name string, text string) (*Objects, error) {
	o := &Objects{}
	typed(o)
	return o, o.Read(name, strings.NewReader(text))
}

// dump renders the objects kept, one per line, then the counts of those
// ignored.
func dump(o *Objects) string {
	var b strings.Builder
	for _, v := range o.Kept {
		fmt.Fprintln(&b, v)
	}
	var ig []string
	for k, n := range o.Ignored {
		ig = append(ig, fmt.Sprintf("ignored %s: %d\n", k, n))
	}
	sort.Strings(ig)
	b.WriteString(strings.Join(ig, ""))
	return b.String()
}

// TestReadGolden lists where each object of kubectl's outputs under
// testdata was read.
func TestReadGolden(t *testing.T) {
	for _, file := range []string{"cluster.yaml", "cluster.json", "multidoc.yaml", "stream.json"} {
		t.Run(file, func(t *testing.T) {
			text, err := os.ReadFile(filepath.Join("testdata", file))
			if err != nil {
				t.Fatal(err)
			}
			o, err := read(file, string(text))
			if err != nil {
				t.Fatal(err)
			}
			got := dump(o)
			golden := filepath.Join("testdata", file+".golden")
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
				t.Errorf("%s differs from %s:\n--- got\n%s--- want\n%s", file, golden, got, want)
			}
		})
	}
}

func TestReadErrors(t *testing.T) {
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
		{"metadata of the wrong type", "apiVersion: v1\nkind: Node\nmetadata: {name: w, uid: 7}\n",
			`f:1: Node w: metadata.uid: expected a string, found number: quote it`},
		{"list item without kind", "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: p}\n- metadata: {name: q}\n",
			`f:7: object has no kind`},
		{"items not a list", "apiVersion: v1\nkind: PodList\nitems:\n  a: b\n", `f:1: items is not a list`},
		{"duplicate key", pod + "kind: Service\n", `f:6: key "kind" already set in map`},
		{"infinity", pod + "spec:\n  priority: .inf\n", `f:1: json: unsupported value: +Inf`},
		{"conflicting duplicate", pod + "  resourceVersion: \"1\"\n---\n" + pod + "  resourceVersion: \"2\"\n",
			`f:8: Pod ns/p appears again, with other contents (first at f:1): give each object once`},
		{"conflicting duplicate in a list", "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Node\n  metadata: {name: w}\n- apiVersion: v1\n  kind: Node\n  metadata: {name: w}\n",
			`f:7: Node w appears again, with other contents (first at f:4): give each object once`},
		{"directive", pod + "...\n%YAML 1.1\n---\nmetadata: {name: x}\n", `f:9: object has no kind`},
		{"a document after an end marker", pod + "...\nmetadata: {name: x}\n", `f:7: object has no kind`},
		{"content after a separator", pod + "--- {kind: Pod}\n", `f:6: invalid Yaml document separator: {kind: Pod}: after --- a line may hold only a comment; start the document on the next line`},
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
			o, err := read("f", tc.in)
			if err == nil {
				t.Fatalf("no error; read %s", dump(o))
			}
			if err.Error() != tc.want {
				t.Errorf("error:\n got %s\nwant %s", err, tc.want)
			}
		})
	}
}

func TestReadAccepts(t *testing.T) {
	const want = "Pod ns/p uid= rv= at f:1\n"
	at := func(line int) string { return strings.Replace(want, "f:1", "f:"+strconv.Itoa(line), 1) }
	for _, tc := range []struct{ name, in, want string }{
		{"yaml flow mapping", `{apiVersion: v1, kind: Pod, metadata: {name: p, namespace: ns}}`, want},
		{"leading separator and comments", "# hi\n---\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns}\n...\n", at(4)},
		{"UTF-8 byte-order mark", "\xEF\xBB\xBF{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\",\"namespace\":\"ns\"}}", want},
		{"UTF-16 from PowerShell", utf16le("apiVersion: v1\r\nkind: Pod\r\nmetadata:\r\n  name: p\r\n  namespace: ns\r\n"), want},
		{"CRLF line ends", "\r\napiVersion: v1\r\nkind: Pod\r\nmetadata:\r\n  name: p\r\n  namespace: ns\r\n---\r\n", at(2)},
		{"namespace defaults", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n", strings.Replace(want, "ns/p", "default/p", 1)},
		{"merge keys", "apiVersion: v1\nkind: Pod\nmetadata:\n  <<: {name: p}\n  namespace: ns\n", want},
		{"anchors and aliases", "apiVersion: v1\nkind: Pod\nmetadata: {name: &n p, namespace: ns}\nspec: {hostname: *n}\n", want},
		{"unknown fields from newer clusters", "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns}\nspec: {futureField: {a: 1}}\n", want},
		{"exact repeat kept once", "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns, uid: u, resourceVersion: \"7\"}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns, uid: u, resourceVersion: \"7\"}\n",
			"Pod ns/p uid=u rv=7 at f:1\n"},
		{"empty", "", ""},
		{"only comments", "# nothing\n---\n# here\n", ""},
		{"empty list", "apiVersion: v1\nkind: List\nitems: []\n", ""},
		{"null items", "{\"apiVersion\":\"v1\",\"kind\":\"PodList\",\"items\":null}", ""},
		{"nested list", "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: PodList\n  items:\n  - metadata: {name: p, namespace: ns}\n", at(4)},
		{"other kinds counted", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\napiVersion: v1\nkind: ConfigMap\n", "ignored v1 ConfigMap: 2\n"},
		{"a separator with a comment", "apiVersion: v1\nkind: ConfigMap\n--- # next\napiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns}\n", at(4) + "ignored v1 ConfigMap: 1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := read("f", tc.in)
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

// TestReadListLayouts covers how a YAML list's layout places its items: as
// kubectl prints it, each item at its line; otherwise, at the document's.
func TestReadListLayouts(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"kubectl layout", "apiVersion: v1\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: a, namespace: ns}\n\n# c\n- metadata: {name: b}\nkind: List\n",
			"error f:8: object has no kind"},
		{"indented items, a comment after the key, no final newline",
			"kind: List\napiVersion: v1\nitems: # pods\n  # first\n  - apiVersion: v1\n    kind: Pod\n    metadata: {name: a, namespace: ns,\n      annotations: {x: z}}\n  - metadata: {name: b}",
			"error f:9: object has no kind"},
		{"typed list, kind first", "apiVersion: v1\nkind: PodList\nitems:\n- metadata: {name: a, namespace: ns}\n- metadata: {name: b, namespace: ns}\n  spec: {hostNetwork: x}\n",
			"error f:5: Pod ns/b: spec.hostNetwork: expected a boolean, found string"},
		{"typed list, kind last", "apiVersion: v1\nitems:\n- metadata: {name: a, namespace: ns}\n- metadata: {name: b, namespace: ns}\nkind: PodList\n",
			"Pod ns/a uid= rv= at f:3\nPod ns/b uid= rv= at f:4\n"},
		{"empty block", "items:\nkind: List\n", ""},
		{"flow items", "apiVersion: v1\nkind: List\nitems: [{apiVersion: v1, kind: Pod, metadata: {name: a, namespace: ns}}, {}]\n",
			"error f:1: object has no kind"},
		{"items of an object that is not a list", "apiVersion: v1\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: a}\nkind: Foo\n", "ignored v1 Foo: 1\n"},
		{"items deeper than the root", "apiVersion: v1\nkind: Foo\nspec:\n  items:\n  - apiVersion: v1\n    kind: Pod\n", "ignored v1 Foo: 1\n"},
		{"items twice", "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: a}\nitems:\n- b\n",
			`error f:8: key "items" already set in map`},
		{"tab in a quoted string", "apiVersion: v1\nkind: List\nitems:\n  - apiVersion: v1\n    kind: Pod\n    metadata: {name: a, namespace: ns, annotations: {x: \"multi\n\tline\"}}\n  - {}\n",
			"error f:8: object has no kind"},
		{"a dash at column 0 in a quoted string", "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: a\n    annotations:\n      a: \"x\n- y\"\n- {}\n",
			"error f:1: object has no kind"},
		{"alias to an earlier item", "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: a, namespace: ns, labels: &l {app: a}}\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: b, namespace: ns, labels: *l}\n",
			"Pod ns/a uid= rv= at f:4\nPod ns/b uid= rv= at f:7\n"},
		{"json, kind last", `{"items":[{"metadata":{"name":"a","namespace":"ns"}},` + "\n" + `{"metadata":{"name":"b","namespace":"ns"}}],"kind":"PodList","apiVersion":"v1"}`,
			"Pod ns/a uid= rv= at f:1\nPod ns/b uid= rv= at f:2\n"},
		{"json, kind last, items of an object that is not a list", `{"apiVersion":"v1","items":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"}}],"kind":"Foo"}`, "ignored v1 Foo: 1\n"},
		{"json, kind first, items of an object that is not a list", `{"apiVersion":"v1","kind":"Foo","items":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"}}]}`, "ignored v1 Foo: 1\n"},
		{"json, items twice", `{"apiVersion":"v1","kind":"List","items":[],` + "\n" + `"items":[]}`, "error f:2: items appears twice"},
		{"json, wrong type in a single object", "{\n \"apiVersion\": \"v1\",\n \"kind\": \"Pod\",\n \"metadata\": {\"name\": \"p\"},\n \"spec\": {\n  \"nodeName\": 5\n }\n}",
			"error f:6: Pod p: spec.nodeName: expected a string, found number: quote it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := read("f", tc.in)
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

// TestReadRollback covers the items of a JSON object read before its kind,
// which turns out to be no list: what they added is forgotten, and what
// earlier inputs added is kept.
func TestReadRollback(t *testing.T) {
	o := &Objects{}
	typed(o)
	if err := o.Read("a", strings.NewReader("apiVersion: v1\nkind: Node\nmetadata: {name: w}\n")); err != nil {
		t.Fatal(err)
	}
	in := `{"items":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns"}}],
"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"}}`
	if err := o.Read("d.json", strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	if got := dump(o); got != "Node w uid= rv= at a:1\nignored apps/v1 Deployment: 1\n" || o.Saw("Pod") {
		t.Errorf("after the rollback:\n%s", got)
	}
	// The pod read ahead is forgotten: it may be read again.
	if err := o.Read("b", strings.NewReader("apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns, resourceVersion: \"9\"}\n")); err != nil || !o.Saw("Pod") {
		t.Errorf("the pod again: %v", err)
	}
}

// TestReadKinds covers what a kind kept says of its objects: the only name
// kept, and the namespace of a cluster-scoped kind, which is not read.
func TestReadKinds(t *testing.T) {
	o := &Objects{}
	o.Keep(func(obj *Object) (any, error) { return obj.Kind + " " + ref(obj.Namespace, obj.Name), nil },
		Kind{APIVersion: "example.com/v1", Kind: "Config", Name: "default"},
		Kind{APIVersion: "example.com/v1", Kind: "Thing"})
	in := "apiVersion: example.com/v1\nkind: Config\nmetadata: {name: spare}\n---\n" +
		"apiVersion: example.com/v1\nkind: Config\nmetadata: {name: default}\n---\n" +
		"apiVersion: example.com/v1\nkind: Thing\nmetadata: {name: t, namespace: ns}\n"
	if err := o.Read("f", strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	if got := dump(o); got != "Config default\nThing t\nignored example.com/v1 Config: 1\n" {
		t.Errorf("got\n%s", got)
	}
	if !o.Saw("Config") || o.Saw("Pod") {
		t.Errorf("Saw")
	}
	defer func() {
		if recover() == nil {
			t.Errorf("a kind kept twice did not panic")
		}
	}()
	o.Keep(nil, Kind{APIVersion: "example.com/v1", Kind: "Thing"})
}

// TestDecodeNumbers covers the numbers Decode keeps exact.
func TestDecodeNumbers(t *testing.T) {
	o := &Objects{}
	var got any
	o.Keep(func(obj *Object) (any, error) {
		var m map[string]any
		err := obj.Decode(&m)
		got = m["spec"].(map[string]any)["sequenceNumber"]
		return nil, err
	}, Kind{APIVersion: "crd.projectcalico.org/v1", Kind: "IPAMBlock"})
	for _, in := range []string{
		"apiVersion: crd.projectcalico.org/v1\nkind: IPAMBlock\nmetadata: {name: b}\nspec: {sequenceNumber: 1795456171884406479}\n",
		`{"apiVersion":"crd.projectcalico.org/v1","kind":"IPAMBlock","metadata":{"name":"c"},"spec":{"sequenceNumber":1795456171884406479}}`,
	} {
		if err := o.Read("f", strings.NewReader(in)); err != nil {
			t.Fatal(err)
		}
		if n, ok := got.(interface{ String() string }); !ok || n.String() != "1795456171884406479" {
			t.Errorf("sequenceNumber = %#v", got)
		}
	}
}

var errPrefix = regexp.MustCompile(`^fuzz\.yaml:([1-9][0-9]*): `)

func FuzzReadObjects(f *testing.F) {
	for _, name := range []string{"cluster.yaml", "multidoc.yaml", "stream.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
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
		"apiVersion: v1\nitems:\n- apiVersion: crd.projectcalico.org/v1\n  kind: IPAMBlock\n  metadata: {name: 10-244-0-0-30, uid: u}\n" +
			"  spec: {cidr: 10.244.0.0/30, sequenceNumber: 1795456171884406479, sequenceNumberForAllocation: {\"0\": 1795456171884406478}}\nkind: List\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		o := &Objects{}
		typed(o)
		err := o.Read("fuzz.yaml", bytes.NewReader(data))
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
		for _, v := range o.Kept {
			if v == nil {
				t.Fatalf("nothing kept for an object: %q", data)
			}
		}
	})
}
