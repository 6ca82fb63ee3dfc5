package build

import (
	"flag"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "refresh recipe/ from the repository's scripts/ and tools/")

// repoRoot is the repository's root, seen from this package's directory.
const repoRoot = "../.."

// recipe/ holds, for every set, a copy of its script and of every file of
// its tools/ module, and nothing else: a change to the repository's
// recipe that is not copied here fails, since a user's build would not
// have it. go test ./lab/build -update refreshes the copies.
func TestRecipeIsTheRepository(t *testing.T) {
	want := map[string]string{} // copy's path in recipeFS -> original's path
	for _, s := range Sets {
		want[path.Join(recipeDir, s.Script+copySuffix)] = s.Script
		entries, err := os.ReadDir(filepath.Join(repoRoot, s.Tools))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			f := path.Join(s.Tools, e.Name())
			want[path.Join(recipeDir, f+copySuffix)] = f
		}
	}
	if *update {
		if err := os.RemoveAll(recipeDir); err != nil {
			t.Fatal(err)
		}
		for cp, orig := range want {
			b, err := os.ReadFile(filepath.Join(repoRoot, orig))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Dir(cp), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(cp, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// What is on disk, not what was embedded: -update is checked too.
	disk := os.DirFS(".")
	var have []string
	if err := fs.WalkDir(disk, recipeDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			have = append(have, p)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for _, cp := range have {
		orig, ok := want[cp]
		if !ok {
			t.Errorf("%s is the copy of nothing a build needs: remove it (go test ./lab/build -update)", cp)
			continue
		}
		got, err := fs.ReadFile(disk, cp)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(repoRoot, orig))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(b) {
			t.Errorf("%s differs from %s: refresh the copy with go test ./lab/build -run TestRecipeIsTheRepository -update", cp, orig)
		}
	}
	for cp, orig := range want {
		if !slices.Contains(have, cp) {
			t.Errorf("%s has no copy %s: make it with go test ./lab/build -run TestRecipeIsTheRepository -update", orig, cp)
		}
	}
	// The binary embeds what is on disk.
	for _, cp := range have {
		if _, err := fs.Stat(recipeFS, cp); err != nil && !*update {
			t.Errorf("%s is not embedded: %v", cp, err)
		}
	}
}

// A set's Takes is what its script's header comment says a cold build
// takes ("about 10 minutes", "~15 seconds"): the prompt and the help text
// quote the script.
func TestTakesIsTheScripts(t *testing.T) {
	re := regexp.MustCompile(`(?:about|~) ?(\d+) (minutes|seconds)`)
	for _, s := range Sets {
		b, err := fs.ReadFile(recipeFS, path.Join(recipeDir, s.Script+copySuffix))
		if err != nil {
			t.Fatal(err)
		}
		var header strings.Builder
		for _, l := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(l, "#") {
				break
			}
			header.WriteString(l + "\n")
		}
		m := re.FindStringSubmatch(header.String())
		if m == nil {
			t.Errorf("%s's header does not say how long a cold build takes", s.Script)
			continue
		}
		n, _ := strconv.Atoi(m[1])
		said := time.Duration(n) * time.Second
		if m[2] == "minutes" {
			said = time.Duration(n) * time.Minute
		}
		if said != s.Takes {
			t.Errorf("%s says a build takes %q; the set %s says %s", s.Script, m[0], s.Name, s.Takes)
		}
	}
}

// Each set's recipe holds its script and its module: go.mod, go.sum and
// tools.go; a lay-out writes them as the repository holds them.
func TestLayOut(t *testing.T) {
	for _, s := range Sets {
		dir := t.TempDir()
		script, err := layOut(recipeFS, s, dir)
		if err != nil {
			t.Fatal(err)
		}
		if script != filepath.Join(dir, s.Script) {
			t.Errorf("%s: script at %s", s.Name, script)
		}
		for _, f := range []string{s.Script, s.Tools + "/go.mod", s.Tools + "/go.sum", s.Tools + "/tools.go"} {
			got, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				t.Errorf("%s: %v", s.Name, err)
				continue
			}
			orig, err := os.ReadFile(filepath.Join(repoRoot, f))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(orig) {
				t.Errorf("%s: %s laid out differs from the repository's", s.Name, f)
			}
		}
		if fi, err := os.Stat(script); err != nil || fi.Mode()&0o111 == 0 {
			t.Errorf("%s: %s is not executable: %v", s.Name, script, err)
		}
	}
}
