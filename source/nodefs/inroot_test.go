package nodefs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// linkTree is a host root beside a directory outside it. Every file in the
// root holds "inside <its path>"; every file outside holds "outside": a
// read that returns "outside" left the root.
type linkTree struct {
	base, root, outside string
}

func newLinkTree(t *testing.T) linkTree {
	t.Helper()
	base := t.TempDir()
	lt := linkTree{base: base, root: filepath.Join(base, "root"), outside: filepath.Join(base, "outside")}
	for _, d := range []string{lt.root, lt.outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return lt
}

// file writes "inside P" at P under the root, or "outside" at P under the
// outside directory when outside is true.
func (lt linkTree) file(t *testing.T, p string, outside bool) {
	t.Helper()
	dir, content := lt.root, "inside "+p
	if outside {
		dir, content = lt.outside, "outside"
	}
	full := filepath.Join(dir, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// link makes the link p under the root, pointing at target (OUTSIDE in it
// is the outside directory's path on this host).
func (lt linkTree) link(t *testing.T, p, target string) {
	t.Helper()
	full := filepath.Join(lt.root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(strings.ReplaceAll(target, "OUTSIDE", lt.outside), full); err != nil {
		t.Fatal(err)
	}
}

// Every shape of link a node's tree may hold, in the last component or in
// a parent directory, resolves inside the host root as the node resolves
// it on its own /, with the kernel's openat2 and with the walk alike;
// none leads to the files outside the root, which a plain open (what
// ReadIn did before: the parent directories resolved by this process)
// reads.
func TestReadInResolvesEveryComponentInsideTheRoot(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(t *testing.T, lt linkTree)
		read  string
		// want is the content read, or "error: " and what the error says.
		want string
	}{
		{"a parent directory linked to an absolute path outside the root",
			func(t *testing.T, lt linkTree) {
				lt.file(t, "nodename", true)
				lt.link(t, "var/lib/calico", "OUTSIDE")
			},
			"/var/lib/calico/nodename", "error: no such file or directory"},
		{"a parent directory linked to an absolute path, as on the node",
			func(t *testing.T, lt linkTree) {
				lt.file(t, "nodename", true)
				lt.file(t, "elsewhere/nodename", false)
				lt.link(t, "var/lib/calico", "/elsewhere")
			},
			"/var/lib/calico/nodename", "inside elsewhere/nodename"},
		{"a parent linked by a relative path with more .. than the root is deep",
			func(t *testing.T, lt linkTree) {
				lt.file(t, "nodename", true)
				lt.file(t, "outside/nodename", false)
				lt.link(t, "var/lib/calico", "../../../../../../../../outside")
			},
			"/var/lib/calico/nodename", "inside outside/nodename"},
		{"a link in the middle component",
			func(t *testing.T, lt linkTree) {
				lt.file(t, "data/calico/nodename", false)
				lt.link(t, "var/lib", "/data")
			},
			"/var/lib/calico/nodename", "inside data/calico/nodename"},
		{"a chain of links, absolute and relative",
			func(t *testing.T, lt linkTree) {
				lt.file(t, "c/d/nodename", false)
				lt.link(t, "var/lib/calico", "/a")
				lt.link(t, "a", "b/../b2")
				lt.mkdir(t, "b")
				lt.link(t, "b2", "c/d")
			},
			"/var/lib/calico/nodename", "inside c/d/nodename"},
		{"a link whose target climbs through a link",
			func(t *testing.T, lt linkTree) {
				// x/.. is the parent of what x points to, not the
				// directory x is in.
				lt.file(t, "p/q/f", false)
				lt.file(t, "p/f2", false)
				lt.link(t, "x", "p/q")
				lt.link(t, "y", "x/../f2")
			},
			"/y", "inside p/f2"},
		{"the path itself climbs above the root",
			func(t *testing.T, lt linkTree) {
				lt.file(t, "secret", true)
				lt.file(t, "outside/secret", false)
			},
			"/../../../outside/secret", "inside outside/secret"},
		{"the last component linked out of the root",
			func(t *testing.T, lt linkTree) {
				lt.file(t, "secret", true)
				lt.link(t, "var/lib/calico/nodename", "OUTSIDE/secret")
			},
			"/var/lib/calico/nodename", "error: no such file or directory"},
		{"a link to the root, then up",
			func(t *testing.T, lt linkTree) {
				lt.file(t, "secret", true)
				lt.file(t, "secret", false)
				lt.link(t, "r", "/")
			},
			"/r/../../r/../secret", "inside secret"},
		{"a loop",
			func(t *testing.T, lt linkTree) {
				lt.link(t, "var/lib/calico", "/var/lib/loop")
				lt.link(t, "var/lib/loop", "calico")
			},
			"/var/lib/calico/nodename", "error: too many levels of symbolic links"},
		{"a chain longer than the kernel follows",
			func(t *testing.T, lt linkTree) {
				lt.file(t, "end", false)
				for i := range MaxLinks + 1 {
					lt.link(t, fmt.Sprintf("l%d", i), fmt.Sprintf("l%d", i+1))
				}
				lt.link(t, fmt.Sprintf("l%d", MaxLinks+1), "end")
			},
			"/l0", "error: too many levels of symbolic links"},
		{"a dangling link",
			func(t *testing.T, lt linkTree) { lt.link(t, "var/lib/calico/nodename", "/nowhere") },
			"/var/lib/calico/nodename", "error: no such file or directory"},
		{"a link to a named pipe",
			func(t *testing.T, lt linkTree) {
				lt.mkdir(t, "run")
				if err := syscall.Mkfifo(filepath.Join(lt.root, "run/fifo"), 0o600); err != nil {
					t.Fatal(err)
				}
				lt.link(t, "var/lib/calico/nodename", "/run/fifo")
			},
			"/var/lib/calico/nodename", "error: a named pipe, not a regular file: not read"},
		{"a directory",
			func(t *testing.T, lt linkTree) { lt.mkdir(t, "var/lib/calico/nodename") },
			"/var/lib/calico/nodename", "error: a directory, not a file"},
	} {
		for _, r := range []resolver{resolveAuto, resolveWalk} {
			t.Run(fmt.Sprintf("%s/%s", c.name, r), func(t *testing.T) {
				defer func(was resolver) { resolve = was }(resolve)
				resolve = r
				lt := newLinkTree(t)
				c.setup(t, lt)
				b, err := ReadIn(lt.root, c.read)
				got := string(b)
				if err != nil {
					got = "error: " + err.Error()
				}
				if want, ok := strings.CutPrefix(c.want, "error: "); ok {
					if err == nil || !strings.HasSuffix(err.Error(), want) {
						t.Errorf("ReadIn(%s) = %q, want an error ending %q", c.read, got, want)
					}
					return
				}
				if got != c.want {
					t.Errorf("ReadIn(%s) = %q, want %q", c.read, got, c.want)
				}
			})
		}
	}
}

func (lt linkTree) mkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(lt.root, p), 0o755); err != nil {
		t.Fatal(err)
	}
}

func (r resolver) String() string {
	if r == resolveWalk {
		return "walk"
	}
	return "openat2"
}

// ReadFileIn refuses a link as the last component, Lstat describes it,
// Stat and ReadDir follow it inside the root; a parent directory linked
// out of the root leads none of them out.
func TestLstatStatReadDirInsideTheRoot(t *testing.T) {
	for _, r := range []resolver{resolveAuto, resolveWalk} {
		t.Run(r.String(), func(t *testing.T) {
			defer func(was resolver) { resolve = was }(resolve)
			resolve = r
			lt := newLinkTree(t)
			lt.file(t, "networks/kindnet/10.0.0.2", true)
			lt.file(t, "data/networks/kindnet/10.0.0.3", false)
			lt.link(t, "var/lib/cni", "OUTSIDE")
			lt.link(t, "var/lib/cni2", "/data")
			lt.link(t, "data/networks/kindnet/10.0.0.4", "10.0.0.3")

			if _, err := ReadDir(lt.root, "/var/lib/cni/networks/kindnet"); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("ReadDir through a parent linked out of the root: %v, want it not to exist", err)
			}
			if _, err := Stat(lt.root, "/var/lib/cni/networks"); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("Stat through a parent linked out of the root: %v, want it not to exist", err)
			}
			entries, err := ReadDir(lt.root, "/var/lib/cni2/networks/kindnet")
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range entries {
				fi, err := e.Info()
				if err != nil {
					t.Fatal(err)
				}
				names = append(names, fmt.Sprintf("%s %s %d", e.Name(), e.Type(), fi.Size()))
			}
			if got, want := strings.Join(names, ", "), "10.0.0.3 ---------- 37, 10.0.0.4 L--------- 8"; got != want {
				t.Errorf("ReadDir = %s, want %s", got, want)
			}
			if fi, err := Lstat(lt.root, "/var/lib/cni2/networks/kindnet/10.0.0.4"); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
				t.Errorf("Lstat of a link: %v, %v; want the link", fi, err)
			}
			if fi, err := Stat(lt.root, "/var/lib/cni2/networks/kindnet/10.0.0.4"); err != nil || !fi.Mode().IsRegular() {
				t.Errorf("Stat of a link: %v, %v; want its target", fi, err)
			}
			if fi, err := Lstat(lt.root, "/var/lib/cni2"); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
				t.Errorf("Lstat of a linked directory: %v, %v; want the link", fi, err)
			}
			if _, err := ReadFileIn(lt.root, "/var/lib/cni2/networks/kindnet/10.0.0.4"); err == nil {
				t.Error("ReadFileIn read through a link as the last component")
			}
			if b, err := ReadFileIn(lt.root, "/var/lib/cni2/networks/kindnet/10.0.0.3"); err != nil || string(b) != "inside data/networks/kindnet/10.0.0.3" {
				t.Errorf("ReadFileIn through a linked parent = %q, %v", b, err)
			}
		})
	}
}
