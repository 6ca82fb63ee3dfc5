package kube

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// TestReadObjectsListMemory measures reading what `kubectl get pods -A -o
// yaml` (and -o json) prints for a large cluster: one List document of
// KUBE_LIST_PODS pods, each a copy of the first pod of ../kubectl/testdata/cluster.yaml.
// Each file is read by a child process, which reports its peak resident
// memory (VmHWM), the time the read took, the bytes allocated and those
// still in use after it (the objects read). It is skipped unless
// KUBE_LIST_PODS is set:
//
//	KUBE_LIST_PODS=150000 go test ./source/kube -run '^TestReadObjectsListMemory$' -v -timeout 30m
func TestReadObjectsListMemory(t *testing.T) {
	if path := os.Getenv("KUBE_LIST_READ"); path != "" {
		readListAndReport(t, path)
		return
	}
	n, _ := strconv.Atoi(os.Getenv("KUBE_LIST_PODS"))
	if n <= 0 {
		t.Skip("set KUBE_LIST_PODS to the number of pods to read")
	}
	dir := t.TempDir()
	for _, format := range []string{"yaml", "json"} {
		path := filepath.Join(dir, "pods."+format)
		size := writePodList(t, path, format, n)
		cmd := exec.Command(os.Args[0], "-test.run=^TestReadObjectsListMemory$")
		cmd.Env = append(os.Environ(), "KUBE_LIST_READ="+path, "KUBE_LIST_PODS="+strconv.Itoa(n))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("reading %s: %v\n%s", path, err, out)
		}
		report, _, ok := strings.Cut(string(out), "\n")
		if !ok || !strings.HasPrefix(report, "read ") {
			t.Fatalf("reading %s: unexpected output:\n%s", path, out)
		}
		t.Logf("%s, %d MB: %s", format, size>>20, report)
	}
}

// readListAndReport runs in the child process: it reads the List at path
// and prints one line with the time taken and the peak resident memory.
func readListAndReport(t *testing.T, path string) {
	want, _ := strconv.Atoi(os.Getenv("KUBE_LIST_PODS"))
	start := time.Now()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	o, err := ReadObjects(path, f)
	if err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	if len(o.Kube.Pods) != want {
		t.Fatalf("read %d pods, want %d", len(o.Kube.Pods), want)
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	hwm := "unknown"
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			hwm = strings.TrimSpace(v)
		}
	}
	// What stays on the heap is what was read, kept.
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Printf("read %d pods in %.1fs, peak RSS (VmHWM) %s, allocated %d MB in all, %d MB kept\n",
		len(o.Kube.Pods), elapsed.Seconds(), hwm, ms.TotalAlloc>>20, ms.HeapAlloc>>20)
	runtime.KeepAlive(o)
}

// writePodList writes a List of n pods to path as kubectl prints it in
// format (yaml or json), and returns its size.
func writePodList(t *testing.T, path, format string, n int) int64 {
	src, err := os.ReadFile("../kubectl/testdata/cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The first item runs from the first "- " line to the second.
	first := bytes.Index(src, []byte("\n- ")) + 1
	end := first + 1 + bytes.Index(src[first+1:], []byte("\n- ")) + 1
	item := src[first:end]
	const name = "coredns-6f6b679f8f-7lq2x"
	var seq []json.RawMessage
	if err := yaml.Unmarshal(item, &seq); err != nil || len(seq) != 1 {
		t.Fatalf("the first item of cluster.yaml: %v", err)
	}
	var indented bytes.Buffer
	if err := json.Indent(&indented, seq[0], "        ", "    "); err != nil {
		t.Fatal(err)
	}

	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var head, sep, tail string
	var tmpl []byte
	switch format {
	case "yaml":
		head, sep, tail = "apiVersion: v1\nitems:\n", "", "kind: List\nmetadata:\n  resourceVersion: \"\"\n"
		tmpl = item
	case "json":
		head, sep, tail = "{\n    \"apiVersion\": \"v1\",\n    \"items\": [\n", ",\n",
			"\n    ],\n    \"kind\": \"List\",\n    \"metadata\": {\n        \"resourceVersion\": \"\"\n    }\n}\n"
		tmpl = append([]byte("        "), indented.Bytes()...)
	}
	before, after, ok := bytes.Cut(tmpl, []byte(name))
	if !ok {
		t.Fatalf("no %s in the %s template", name, format)
	}
	w.WriteString(head)
	for i := range n {
		if i > 0 {
			w.WriteString(sep)
		}
		w.Write(before)
		fmt.Fprintf(w, "pod-%07d", i)
		w.Write(after)
	}
	w.WriteString(tail)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return st.Size()
}
