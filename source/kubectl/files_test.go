package kubectl

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pods := write("pods.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns, uid: u1, resourceVersion: \"1\"}\n")
	nodes := write("nodes.json", `{"apiVersion":"v1","kind":"List","items":[`+"\n"+`{"apiVersion":"v1","kind":"Node","metadata":{"name":"w"}}]}`)
	changed := write("changed.yaml", "\napiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns, uid: u1, resourceVersion: \"2\"}\n")
	missing := filepath.Join(dir, "nope.yaml")

	t.Run("merged, read once", func(t *testing.T) {
		f := &Files{Paths: []string{pods, "-", nodes}, Stdin: strings.NewReader("apiVersion: v1\nkind: Pod\nmetadata: {name: q, namespace: ns}\n")}
		typed(&f.objs)
		o, err := f.Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		want := "Pod ns/p uid=u1 rv=1 at " + pods + ":1\nPod ns/q uid= rv= at stdin:1\nNode w uid= rv= at " + nodes + ":2\n"
		if got := dump(o); got != want {
			t.Errorf("got\n%swant\n%s", got, want)
		}
		// stdin is read once: the second Read returns what the first read.
		if again, err := f.Read(context.Background()); err != nil || again != o {
			t.Errorf("read again: %v, %v", again, err)
		}
		defer func() {
			if recover() == nil {
				t.Errorf("Keep after Read did not panic")
			}
		}()
		f.Keep(keepName, Kind{APIVersion: "v1", Kind: "Service"})
	})
	for _, tc := range []struct {
		name  string
		paths []string
		want  string
	}{
		{"changed object", []string{pods, changed}, changed + ":2: Pod ns/p appears again, with other contents (first at " + pods + ":1): give each object once"},
		{"missing file", []string{pods, missing}, "open " + missing + ": no such file or directory"},
		{"no file", nil, "no kubectl output file given"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &Files{Paths: tc.paths}
			typed(&f.objs)
			o, err := f.Read(context.Background())
			if err == nil || err.Error() != tc.want || o != nil {
				t.Errorf("got %v, %v; want %s", o, err, tc.want)
			}
		})
	}
	t.Run("a missing file is fs.ErrNotExist, with its path", func(t *testing.T) {
		_, err := (&Files{Paths: []string{missing}}).Read(context.Background())
		var pe *fs.PathError
		if !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &pe) || pe.Path != missing {
			t.Errorf("got %v", err)
		}
	})
	t.Run("canceled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := (&Files{Paths: []string{pods}}).Read(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("got %v", err)
		}
	})
}

// A directory is read as kubectl -f reads one: its .json, .yaml and .yml
// files, by name, not its subdirectories; one with none of them is an
// error.
func TestFilesReadsADirectory(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"b-pods.yaml":  "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns}\n",
		"a-nodes.json": `{"apiVersion":"v1","kind":"Node","metadata":{"name":"w"}}`,
		"notes.txt":    "not read",
		"sub/c.yaml":   "apiVersion: v1\nkind: Pod\nmetadata: {name: deeper, namespace: ns}\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f := &Files{Paths: []string{dir}}
	typed(&f.objs)
	o, err := f.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := "Node w uid= rv= at " + filepath.Join(dir, "a-nodes.json") + ":1\nPod ns/p uid= rv= at " + filepath.Join(dir, "b-pods.yaml") + ":1\n"
	if got := dump(o); got != want {
		t.Errorf("got\n%swant\n%s", got, want)
	}
	empty := t.TempDir()
	if _, err := (&Files{Paths: []string{empty}}).Read(context.Background()); err == nil || !strings.Contains(err.Error(), "a directory with no .json, .yaml or .yml file") {
		t.Errorf("an empty directory: %v", err)
	}
}

// A table kubectl printed (no -o, or -o wide) is named as such, with the
// command that saves objects.
func TestFilesNamesATable(t *testing.T) {
	p := filepath.Join(t.TempDir(), "pods.txt")
	table := "NAMESPACE     NAME          READY   STATUS    RESTARTS   AGE   IP           NODE\ndefault       web-0         1/1     Running   0          5d    10.244.1.5   n1\n"
	if err := os.WriteFile(p, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	f := &Files{Paths: []string{p}}
	typed(&f.objs)
	if _, err := f.Read(context.Background()); err == nil || !strings.Contains(err.Error(), "a table, as kubectl get prints it without -o or with -o wide, not the objects: save them with -o yaml") {
		t.Errorf("a table: %v", err)
	}
}
