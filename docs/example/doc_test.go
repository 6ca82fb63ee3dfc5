package example

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every Go block of docs/development.md is the examples' code: its first
// line names the file (// docs/example/…), and the rest of it is in that
// file as it stands, so that the page changes when the code does.
func TestDevelopmentPageIsTheExamplesCode(t *testing.T) {
	root := filepath.Join("..", "..")
	page, err := os.ReadFile(filepath.Join(root, "docs", "development.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := 0
	rest := string(page)
	for {
		i := strings.Index(rest, "```go\n")
		if i < 0 {
			break
		}
		rest = rest[i+len("```go\n"):]
		j := strings.Index(rest, "```\n")
		if j < 0 {
			t.Fatal("a Go block does not end")
		}
		block := rest[:j]
		rest = rest[j:]
		blocks++
		first, code, _ := strings.Cut(block, "\n")
		path, ok := strings.CutPrefix(first, "// ")
		if !ok || !strings.HasPrefix(path, "docs/example/") {
			t.Errorf("Go block %d does not start with the file it quotes (// docs/example/…): %q", blocks, first)
			continue
		}
		src, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			t.Errorf("Go block %d: %v", blocks, err)
			continue
		}
		if !strings.Contains(string(src), code) {
			t.Errorf("Go block %d is not in %s as it stands:\n%s", blocks, path, code)
		}
	}
	if blocks < 6 {
		t.Errorf("%d Go blocks: the page's examples are gone", blocks)
	}
}
