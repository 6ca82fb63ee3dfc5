//go:build linux

package hostlocal

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/source"
)

// watching starts w on root and returns a count of its OnChange calls.
func watching(t *testing.T, w *Watch) *atomic.Int32 {
	t.Helper()
	var calls atomic.Int32
	w.OnChange(func() { calls.Add(1) })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return &calls
}

// changed waits for an OnChange call after the calls counted so far, and
// for Changes to say every address may be concerned.
func changed(t *testing.T, w *Watch, calls *atomic.Int32, before int32, what string) {
	t.Helper()
	poll.Until(t, poll.Patience, what, func() bool { return calls.Load() > before })
	if c := w.Changes(); !c.All || c.Why != Name {
		t.Errorf("%s: Changes() = %+v, want every address, by %s", what, c, Name)
	}
	if c := w.Changes(); !c.Empty() {
		t.Errorf("%s: Changes() again = %+v, want none", what, c)
	}
}

// A reservation handed out, the store wiped as in seed 003, and the store
// made again by host-local's next ADD: each is a change, and the store
// made again is watched like the first.
func TestWatchSaysWhenTheStoreChanges(t *testing.T) {
	root := node(t, map[string]string{
		"etc/cni/net.d/10-kindnet.conflist":     `{"name":"kindnet","plugins":[{"type":"ptp","ipam":{"type":"host-local","dataDir":"/run/cni-ipam-state","ranges":[[{"subnet":"10.244.2.0/24"}]]}}]}`,
		"run/cni-ipam-state/kindnet/10.244.2.2": "c1\neth0",
	})
	w := &Watch{Source: Source{Root: root}}
	calls := watching(t, w)
	if c := w.Changes(); !c.Empty() {
		t.Errorf("Changes() before any = %+v", c)
	}
	store := filepath.Join(root, "run/cni-ipam-state/kindnet")
	step := func(what string, do func() error) {
		t.Helper()
		before := calls.Load()
		if err := do(); err != nil {
			t.Fatal(err)
		}
		changed(t, w, calls, before, what)
	}
	step("an address handed out", func() error { return os.WriteFile(filepath.Join(store, "10.244.2.3"), []byte("c2\neth0"), 0o600) })
	step("the data directory removed", func() error { return os.RemoveAll(filepath.Join(root, "run/cni-ipam-state")) })
	step("the data directory made again", func() error { return os.Mkdir(filepath.Join(root, "run/cni-ipam-state"), 0o755) })
	step("the store made again", func() error { return os.Mkdir(store, 0o755) })
	step("an address handed out in the store made again", func() error {
		return os.WriteFile(filepath.Join(store, "10.244.2.2"), []byte("c3\neth0"), 0o600)
	})
	var s source.Source = w
	if s.Name() != Name {
		t.Errorf("Name() = %q", s.Name())
	}
}

// A data directory that is a link out of the host root is not watched
// through it: what changes where it points wakes nothing.
func TestWatchFollowsNoLink(t *testing.T) {
	outside := t.TempDir()
	if err := os.Mkdir(filepath.Join(outside, "kindnet"), 0o755); err != nil {
		t.Fatal(err)
	}
	root := node(t, map[string]string{
		"etc/cni/net.d/10-kindnet.conflist": `{"name":"kindnet","plugins":[{"type":"ptp","ipam":{"type":"host-local","dataDir":"/run/cni-ipam-state","ranges":[[{"subnet":"10.244.2.0/24"}]]}}]}`,
		"run/":                              "",
	})
	if err := os.Symlink(outside, filepath.Join(root, "run/cni-ipam-state")); err != nil {
		t.Fatal(err)
	}
	w := &Watch{Source: Source{Root: root}}
	calls := watching(t, w)
	// Written outside first, then a sentinel in a watched directory:
	// events come in order, so once the sentinel's is read, one from
	// outside would have been too.
	for _, p := range []string{"out-of-root", "kindnet/10.244.2.9"} {
		if err := os.WriteFile(filepath.Join(outside, p), []byte("evil"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "run/sentinel"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	changed(t, w, calls, 0, "the sentinel written")
	w.mu.Lock()
	noted := slices.Clone(w.noted)
	w.mu.Unlock()
	if slices.Contains(noted, "10.244.2.9") || slices.Contains(noted, "out-of-root") || !slices.Contains(noted, "sentinel") {
		t.Errorf("events named %q: want the sentinel, nothing from outside the host root", noted)
	}
}

// What cannot be watched is logged once until it changes, not at every
// change of the store.
func TestWatchWarnsOnce(t *testing.T) {
	var buf bytes.Buffer
	w := &Watch{Log: slog.New(slog.NewTextHandler(&buf, nil))}
	a := errors.New("watching /var/lib/cni/networks/x: permission denied")
	for _, err := range []error{a, a, a, nil, a, errors.New("another")} {
		w.warn(err)
	}
	if n := strings.Count(buf.String(), "level=WARN"); n != 3 {
		t.Errorf("%d warnings, want 3 (the first, again after it cleared, another):\n%s", n, buf.String())
	}
}

// While the store cannot be watched, the watch says its silence is no
// proof that nothing changed.
func TestWatchUnsureWhileItCannotWatch(t *testing.T) {
	w := &Watch{}
	if w.Unsure() {
		t.Error("unsure before any failure")
	}
	w.warn(errors.New("inotify: too many open files"))
	if !w.Unsure() {
		t.Error("sure while the store cannot be watched")
	}
	w.warn(nil)
	if w.Unsure() {
		t.Error("unsure once the store is watched again")
	}
}
