package kubectl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"

	apiyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// listPods is the size of the cluster BenchmarkReadPodList reads: a big
// cluster's pods.
const listPods = 150_000

// BenchmarkReadPodList reads what kubectl get pods -A -o json (and -o yaml)
// prints for a cluster of listPods pods, each a copy of the first pod of
// testdata/cluster.json (cluster.yaml), renamed, and reports the peak heap
// the read took beyond what was in use before it (peak-heap-MB), what it
// still holds once done (kept-MB: each pod's name, and what tells repeats
// apart) and the input's size (input-MB). The input is generated as it is
// read and is not held. Three readers:
//
//   - json/kubectl: this package's streaming JSON reader;
//   - json/apimachinery: apimachinery's YAMLOrJSONDecoder, into a List
//     whose items are kept raw (json.RawMessage), then each item's header;
//     the least a library decoder holds, as it decodes a value whole;
//   - yaml/kubectl: this package on YAML, which apimachinery's YAMLReader
//     splits and sigs.k8s.io/yaml converts a document at a time: the List
//     whole.
//
// Each reads the whole list once per iteration; run it once:
//
//	go test ./source/kubectl -run XXX -bench ReadPodList -benchtime 1x -timeout 30m
func BenchmarkReadPodList(b *testing.B) {
	for _, bc := range []struct {
		name, format string
		read         func(io.Reader) (int, error)
	}{
		{"json/kubectl", "json", readKubectl},
		{"json/apimachinery", "json", readAPIMachinery},
		{"yaml/kubectl", "yaml", readKubectl},
	} {
		b.Run(bc.name, func(b *testing.B) {
			head, item, sep, tail := podList(b, bc.format)
			for b.Loop() {
				in := &generated{head: head, item: item, sep: sep, tail: tail, n: listPods}
				peak := measurePeak(func() {
					n, err := bc.read(&sampling{r: in})
					if err != nil {
						b.Fatal(err)
					}
					if n != listPods {
						b.Fatalf("read %d pods, want %d", n, listPods)
					}
				})
				b.ReportMetric(float64(peak.peak)/1e6, "peak-heap-MB")
				b.ReportMetric(float64(peak.kept)/1e6, "kept-MB")
				b.ReportMetric(float64(in.size)/1e6, "input-MB")
			}
		})
	}
}

// keepName keeps a pod's name: the least a ledger keeps.
func keepName(o *Object) (any, error) { return o.Name, nil }

func readKubectl(r io.Reader) (int, error) {
	o := &Objects{}
	o.Keep(keepName, Kind{APIVersion: "v1", Kind: "Pod", Namespaced: true})
	if err := o.Read("pods", r); err != nil {
		return 0, err
	}
	kept = o
	return len(o.Kept), nil
}

func readAPIMachinery(r io.Reader) (int, error) {
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := apiyaml.NewYAMLOrJSONDecoder(r, 4096).Decode(&list); err != nil {
		return 0, err
	}
	sample()
	names := make([]string, 0, len(list.Items))
	for _, raw := range list.Items {
		h, err := readHeader(object{raw: raw})
		if err != nil {
			return 0, err
		}
		names = append(names, h.Metadata.Name)
	}
	sample()
	kept = names
	return len(names), nil
}

// kept holds what the last read kept, to measure it.
var kept any

// peakHeap is what measurePeak measured.
type peakHeap struct {
	peak, kept uint64
}

// heapSample is the heap's objects, live or not yet swept, in bytes, and
// the most seen since measurePeak started.
var (
	heapSample = []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	heapPeak   uint64
)

// sample records the heap in use now.
func sample() {
	metrics.Read(heapSample)
	heapPeak = max(heapPeak, heapSample[0].Value.Uint64())
}

// measurePeak runs read, sampled (sampling) as it reads, and returns the
// most heap it used beyond what was in use before, and what it kept. The
// collector runs at a tenth of the live heap's growth rather than at its
// doubling, so that the peak is near what the read holds rather than what
// it left for the collector.
func measurePeak(read func()) peakHeap {
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	kept = nil
	runtime.GC()
	metrics.Read(heapSample)
	base := heapSample[0].Value.Uint64()
	heapPeak = base
	read()
	sample()
	runtime.GC()
	metrics.Read(heapSample)
	p := peakHeap{peak: heapPeak - base, kept: heapSample[0].Value.Uint64() - base}
	kept = nil
	return p
}

// sampling samples the heap at every read from r.
type sampling struct{ r io.Reader }

func (s *sampling) Read(p []byte) (int, error) {
	sample()
	return s.r.Read(p)
}

// podList returns the pieces of a List of pods as kubectl prints it in
// format: the text before the first item, an item (in which NAME stands
// for the pod's name), what separates two items and what follows the
// last.
func podList(b *testing.B, format string) (head, item, sep, tail []byte) {
	b.Helper()
	src, err := os.ReadFile("testdata/cluster." + format)
	if err != nil {
		b.Fatal(err)
	}
	// The first item: from its first line to the one before the next.
	var first, next []byte
	switch format {
	case "json":
		head, sep = []byte("{\n    \"apiVersion\": \"v1\",\n    \"items\": [\n"), []byte(",\n")
		tail = []byte("\n    ],\n    \"kind\": \"List\",\n    \"metadata\": {\n        \"resourceVersion\": \"\"\n    }\n}\n")
		first, next = []byte("\n        {\n"), []byte(",\n        {\n")
	case "yaml":
		head, tail = []byte("apiVersion: v1\nitems:\n"), []byte("kind: List\nmetadata:\n  resourceVersion: \"\"\n")
		first, next = []byte("\n- "), []byte("\n- ")
	}
	i := bytes.Index(src, first) + 1
	j := i + bytes.Index(src[i:], next)
	item = src[i:j]
	if format == "yaml" {
		item = src[i : j+1]
	}
	const name = "coredns-6f6b679f8f-7lq2x"
	if bytes.Count(item, []byte(name)) != 1 {
		b.Fatalf("the first item of cluster.%s does not name %s once", format, name)
	}
	return head, bytes.Replace(item, []byte(name), []byte("NAME"), 1), sep, tail
}

// generated is a List of n pods, written as it is read.
type generated struct {
	head, item, sep, tail []byte
	n, i                  int
	buf                   bytes.Buffer
	done                  bool
	size                  int64
}

func (g *generated) Read(p []byte) (int, error) {
	// At most 64 KiB at a time, so that the generator holds little
	// however much the reader asks for.
	p = p[:min(len(p), 64<<10)]
	for g.buf.Len() < len(p) && !g.done {
		if g.i == 0 {
			g.buf.Write(g.head)
		}
		if g.i == g.n {
			g.buf.Write(g.tail)
			g.done = true
			break
		}
		if g.i > 0 {
			g.buf.Write(g.sep)
		}
		before, after, _ := bytes.Cut(g.item, []byte("NAME"))
		g.buf.Write(before)
		fmt.Fprintf(&g.buf, "pod-%07d", g.i)
		g.buf.Write(after)
		g.i++
	}
	n, err := g.buf.Read(p)
	g.size += int64(n)
	if err == io.EOF && !g.done {
		err = nil
	}
	return n, err
}
