package kubectl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// Files are files that kubectl wrote, read once for every ledger that keeps
// objects from them: each asks for its kinds (Keep) before the first Read,
// which reads the files, and every Read returns what it read. Several
// ledgers can so read objects saved together, from stdin too. A Files is
// read once: make another to read the files again.
type Files struct {
	// Paths are the files to read, in order; "-" is Stdin.
	Paths []string
	// Stdin is read for the path "-"; nil means os.Stdin.
	Stdin io.Reader

	mu   sync.Mutex
	objs Objects
	read bool
	err  error
}

// Keep asks for the objects of kinds, each converted by convert; see
// Objects.Keep. It panics once the files are read.
func (f *Files) Keep(convert Convert, kinds ...Kind) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.read {
		panic("kubectl: Keep after the files were read")
	}
	f.objs.Keep(convert, kinds...)
}

// Read reads every file into one Objects, as Objects.Read reads it, the
// first time it is called, and returns the same objects, or the same error,
// afterwards. A file that does not exist is an error that is
// fs.ErrNotExist, with the *fs.PathError that names it.
func (f *Files) Read(ctx context.Context) (*Objects, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.read {
		f.read = true
		f.err = f.readAll(ctx)
	}
	if f.err != nil {
		return nil, f.err
	}
	return &f.objs, nil
}

func (f *Files) readAll(ctx context.Context) error {
	if len(f.Paths) == 0 {
		return errors.New("no kubectl output file given")
	}
	for _, p := range f.Paths {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := f.readFile(p); err != nil {
			return err
		}
	}
	return nil
}

func (f *Files) readFile(path string) error {
	if path == "-" {
		in := f.Stdin
		if in == nil {
			in = os.Stdin
		}
		return f.objs.Read("stdin", in)
	}
	file, err := os.Open(path)
	if err != nil {
		return err
	}
	defer file.Close()
	if fi, err := file.Stat(); err == nil && fi.IsDir() {
		return f.readDir(path)
	}
	return f.objs.Read(path, file)
}

// readDir reads the files of dir whose names end in .json, .yaml or .yml,
// by name, as kubectl -f DIR does (not its subdirectories).
func (f *Files) readDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	n := 0
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".json", ".yaml", ".yml":
		default:
			continue
		}
		if e.IsDir() {
			continue
		}
		if !e.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file (%s)", filepath.Join(dir, e.Name()), e.Type())
		}
		if err := f.readFile(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("%s: a directory with no .json, .yaml or .yml file", dir)
	}
	return nil
}
