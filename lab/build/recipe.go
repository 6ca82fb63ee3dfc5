package build

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// recipeFS holds copies of the repository's files a build needs, each at
// its path in the repository under recipe/ with ".txt" appended, so that
// the go command sees in them neither a module (go.mod) nor a package
// (tools.go); TestRecipeIsTheRepository holds them to the originals.
//
//go:embed recipe
var recipeFS embed.FS

// recipeDir is recipeFS's root.
const recipeDir = "recipe"

// copySuffix is what a copy's name adds to the original's.
const copySuffix = ".txt"

// Files returns the repository paths of the files the set's build needs:
// its script and its module's files.
func (s Set) Files() ([]string, error) { return s.files(recipeFS) }

func (s Set) files(recipe fs.FS) ([]string, error) {
	files := []string{s.Script}
	entries, err := fs.ReadDir(recipe, path.Join(recipeDir, s.Tools))
	if err != nil {
		return nil, fmt.Errorf("the recipe of %s: %w", s.What, err)
	}
	for _, e := range entries {
		files = append(files, path.Join(s.Tools, strings.TrimSuffix(e.Name(), copySuffix)))
	}
	return files, nil
}

// layOut writes the set's recipe under dir as the repository lays it out
// (scripts/, tools/<name>/) and returns the script's path there.
func layOut(recipe fs.FS, s Set, dir string) (string, error) {
	files, err := s.files(recipe)
	if err != nil {
		return "", err
	}
	for _, f := range files {
		b, err := fs.ReadFile(recipe, path.Join(recipeDir, f+copySuffix))
		if err != nil {
			return "", fmt.Errorf("the recipe of %s: %w", s.What, err)
		}
		dst := filepath.Join(dir, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return "", err
		}
		mode := os.FileMode(0o644)
		if f == s.Script {
			mode = 0o755
		}
		if err := os.WriteFile(dst, b, mode); err != nil {
			return "", err
		}
	}
	return filepath.Join(dir, filepath.FromSlash(s.Script)), nil
}
