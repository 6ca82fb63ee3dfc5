package conntrack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
)

var _ source.Source = (*FileSource)(nil)

// fileListing has three entries: one DNATed TCP flow started 30s before the
// capture, one UDP flow that is not translated, one DNATed UDP flow.
const fileListing = `conntrack v1.4.7 (conntrack-tools): 3 flow entries have been shown.
tcp      6 86399 ESTABLISHED src=10.244.1.50 dst=10.96.100.50 sport=45678 dport=5432 src=10.244.3.47 dst=10.244.1.50 sport=5432 dport=45678 [ASSURED] mark=0 delta-time=30 use=1 id=7
udp      17 29 src=10.244.1.50 dst=8.8.8.8 sport=40000 dport=53 src=8.8.8.8 dst=10.244.1.50 sport=53 dport=40000 mark=0 use=1 id=8
udp      17 29 src=10.244.1.50 dst=10.96.0.10 sport=53000 dport=53 [UNREPLIED] src=10.244.0.5 dst=10.244.1.50 sport=53 dport=53000 mark=0 use=1 id=9
`

func writeListing(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "conntrack.txt")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func collectFile(t *testing.T, src *FileSource) *snapshot.Snapshot {
	t.Helper()
	s := &snapshot.Snapshot{}
	if err := src.Collect(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if s.Conntrack == nil {
		t.Fatal("Collect set no Conntrack")
	}
	return s
}

func flowIDs(flows []snapshot.Flow) []uint32 {
	var ids []uint32
	for i := range flows {
		ids = append(ids, flows[i].ID)
	}
	return ids
}

func TestFileSourcePath(t *testing.T) {
	t.Parallel()
	path := writeListing(t, fileListing)
	// A saved listing was captured when it was last written.
	captured := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	if err := os.Chtimes(path, captured, captured); err != nil {
		t.Fatal(err)
	}
	src := &FileSource{Path: path}
	if src.Name() != Name {
		t.Errorf("Name() = %q, want %q", src.Name(), Name)
	}
	src.Narrow([]any{readerOf((*snapshot.Flow).DNAT)})
	s := collectFile(t, src)
	if s.Conntrack.Seen != 3 {
		t.Errorf("Seen %d, want 3", s.Conntrack.Seen)
	}
	flows := s.Conntrack.Flows()
	if ids := flowIDs(flows); len(ids) != 2 || ids[0] != 7 || ids[1] != 9 {
		t.Fatalf("kept IDs %v, want the DNATed 7 and 9", ids)
	}
	want := snapshot.Flow{ID: 7, Proto: snapshot.ProtoTCP,
		Orig:  tup("10.244.1.50:45678", "10.96.100.50:5432"),
		Reply: tup("10.244.3.47:5432", "10.244.1.50:45678"),
		State: "ESTABLISHED", Status: seenAssured, Timeout: 86399,
		Start: captured.Add(-30 * time.Second)}
	if !sameFlow(&flows[0], &want) {
		t.Errorf("kept\n got %s\nwant %s", describeFlow(&flows[0]), describeFlow(&want))
	}
	// The kept flows are copies, not the parser's reused Flow.
	if flows[1].Proto != snapshot.ProtoUDP || flows[1].State != "" {
		t.Errorf("second kept flow %s", describeFlow(&flows[1]))
	}
}

// Now overrides the file's time; CapturedAt (--captured-at) too. Stdin
// without a capture time gives no flow a start time: an age says nothing
// of when, and no proof may rest on it.
func TestFileSourceNow(t *testing.T) {
	t.Parallel()
	path := writeListing(t, fileListing)
	old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	s := collectFile(t, &FileSource{Path: path, Now: func() time.Time { return now }})
	if got, want := s.Conntrack.Flows()[0].Start, now.Add(-30*time.Second); !got.Equal(want) {
		t.Errorf("with Now: start %v, want %v", got, want)
	}

	src := &FileSource{Path: path, CapturedAt: now}
	s = collectFile(t, src)
	if got, want := s.Conntrack.Flows()[0].Start, now.Add(-30*time.Second); !got.Equal(want) {
		t.Errorf("with CapturedAt: start %v, want %v", got, want)
	}
	if d := src.Describe(s); !strings.HasSuffix(d, "flow ages count from --captured-at 2026-11-22T12:00:00Z") {
		t.Errorf("with CapturedAt: %q", d)
	}

	src = &FileSource{Path: "-", Stdin: strings.NewReader(fileListing)}
	s = collectFile(t, src)
	if start := s.Conntrack.Flows()[0].Start; !start.IsZero() {
		t.Errorf("stdin without a capture time: start %v, want none", start)
	}
	if d := src.Describe(s); !strings.Contains(d, "stdin without --captured-at: flow ages are unknown") {
		t.Errorf("stdin: %q", d)
	}
	src = &FileSource{Path: "-", Stdin: strings.NewReader(fileListing), CapturedAt: now}
	if s = collectFile(t, src); !s.Conntrack.Flows()[0].Start.Equal(now.Add(-30 * time.Second)) {
		t.Errorf("stdin with a capture time: start %v", s.Conntrack.Flows()[0].Start)
	}
}

func TestFileSourceStdin(t *testing.T) {
	t.Parallel()
	s := collectFile(t, &FileSource{Path: "-", Stdin: bytes.NewReader([]byte(fileListing))})
	if s.Conntrack.Seen != 3 || s.Conntrack.Len() != 3 {
		t.Errorf("seen %d, kept %d; want 3 and 3", s.Conntrack.Seen, s.Conntrack.Len())
	}
	// Errors name stdin.
	err := (&FileSource{Path: "-", Stdin: strings.NewReader("\nnonsense\n")}).Collect(context.Background(), &snapshot.Snapshot{})
	if err == nil || !strings.HasPrefix(err.Error(), "stdin:2: not a conntrack entry") {
		t.Errorf("error %v, want one at stdin:2", err)
	}
}

// keepFunc is a FlowFilter; readerOf a rule that reads flows through it.
type keepFunc struct {
	fn    func(*snapshot.Flow) bool
	calls int
}

func (k *keepFunc) Keep(f *snapshot.Flow) bool { k.calls++; return k.fn(f) }

type flowReader struct{ f snapshot.FlowFilter }

func (r flowReader) FlowFilter(*snapshot.Snapshot) snapshot.FlowFilter { return r.f }

func readerOf(fn func(*snapshot.Flow) bool) flowReader { return flowReader{&keepFunc{fn: fn}} }

// The source keeps what its readers' filters keep: the union of them, all
// of the table when a reader has no filter, nothing without readers.
func TestFileSourceKeep(t *testing.T) {
	t.Parallel()
	path := writeListing(t, fileListing)
	udp := func(f *snapshot.Flow) bool { return f.Proto == snapshot.ProtoUDP }
	id7 := func(f *snapshot.Flow) bool { return f.ID == 7 }
	shared := readerOf(udp)
	tests := []struct {
		name    string
		readers []any
		narrow  bool
		want    []uint32
	}{
		{"never narrowed: all", nil, false, []uint32{7, 8, 9}},
		{"no reader: none", nil, true, nil},
		{"one filter", []any{readerOf(udp)}, true, []uint32{8, 9}},
		{"the union of two", []any{readerOf(udp), readerOf(id7)}, true, []uint32{7, 8, 9}},
		{"a reader without a filter: all", []any{readerOf(id7), "a rule that does not say"}, true, []uint32{7, 8, 9}},
		{"a nil filter: all", []any{flowReader{}}, true, []uint32{7, 8, 9}},
		{"one filter shared by two rules", []any{shared, shared}, true, []uint32{8, 9}},
	}
	for _, tc := range tests {
		src := &FileSource{Path: path}
		if tc.narrow {
			src.Narrow(tc.readers)
		}
		s := collectFile(t, src)
		got := flowIDs(s.Conntrack.Flows())
		if fmt.Sprint(got) != fmt.Sprint(tc.want) || s.Conntrack.Seen != 3 {
			t.Errorf("%s: kept %v of %d, want %v of 3", tc.name, got, s.Conntrack.Seen, tc.want)
		}
		if d := src.Describe(s); !strings.HasPrefix(d, fmt.Sprintf("3 entries read, %d kept", len(tc.want))) {
			t.Errorf("%s: Describe = %q", tc.name, d)
		}
	}
	// A filter two rules share is asked once per flow.
	if n := shared.f.(*keepFunc).calls; n != 3 {
		t.Errorf("shared filter asked %d times for 3 flows", n)
	}
}

// On any error the snapshot is left as it was.
func TestFileSourceErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope.txt")
	bad := writeListing(t, fileListing+"udp 17 29 src=10.0.0.1 dst=10.0.0.2 sport=1 dport=70000 src=10.0.0.2 dst=10.0.0.1 sport=2 dport=1\n")
	short := writeListing(t, strings.Replace(fileListing, "3 flow entries", "4 flow entries", 1))
	tests := []struct {
		name string
		src  *FileSource
		want string
	}{
		{"missing file", &FileSource{Path: missing}, "conntrack listing " + missing + " does not exist"},
		{"no path", &FileSource{}, "no conntrack listing file given"},
		{"parse error", &FileSource{Path: bad}, bad + ":5: invalid dport=70000 in the original tuple: not a port (0-65535)"},
		{"incomplete listing", &FileSource{Path: short}, short + ":1: conntrack reported 4 flow entries shown but the listing holds 3"},
		{"a directory", &FileSource{Path: dir}, dir + ":1: read " + dir + ": is a directory"},
	}
	for _, tc := range tests {
		prev := &snapshot.Conntrack{Seen: 42}
		s := &snapshot.Snapshot{NodeName: "n1", Conntrack: prev}
		err := tc.src.Collect(context.Background(), s)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to start with %q", tc.name, err, tc.want)
		}
		if s.Conntrack != prev || s.Conntrack.Seen != 42 || s.NodeName != "n1" || len(s.Sources) != 0 {
			t.Errorf("%s: the snapshot changed: %+v", tc.name, s)
		}
	}
	err := (&FileSource{Path: missing}).Collect(context.Background(), &snapshot.Snapshot{})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v does not wrap fs.ErrNotExist", err)
	}
}

func TestFileSourceCanceled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s := &snapshot.Snapshot{}
	// Long enough for the parse to look at the context.
	err := (&FileSource{Path: "-", Stdin: bytes.NewReader(benchListing(10000, false))}).Collect(ctx, s)
	if !errors.Is(err, context.Canceled) || s.Conntrack != nil {
		t.Errorf("canceled: %v, conntrack %v", err, s.Conntrack)
	}
	// And a short one, which it looks at after the parse.
	err = (&FileSource{Path: "-", Stdin: strings.NewReader(fileListing)}).Collect(ctx, s)
	if !errors.Is(err, context.Canceled) || s.Conntrack != nil {
		t.Errorf("canceled, short: %v, conntrack %v", err, s.Conntrack)
	}
}

// Through source.Collect, as scan runs it.
func TestFileSourceInCollect(t *testing.T) {
	t.Parallel()
	now := func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }
	src := &FileSource{Path: writeListing(t, fileListing)}
	src.Narrow([]any{readerOf((*snapshot.Flow).DNAT)})
	s := source.Collect(context.Background(), now, "n1", src)
	if err := s.Ready(Name); err != nil || s.Conntrack == nil || s.Conntrack.Len() != 2 {
		t.Errorf("ready: %v, conntrack %+v", err, s.Conntrack)
	}
	if st, _ := s.Source(Name); !strings.HasPrefix(st.Detail, "3 entries read, 2 kept for the rules; flow ages count from the file's modification time, ") {
		t.Errorf("detail %q", st.Detail)
	}
	s = source.Collect(context.Background(), now, "n1", &FileSource{Path: filepath.Join(t.TempDir(), "gone")})
	if st, _ := s.Source(Name); st.Status != snapshot.StatusError || !strings.Contains(st.Detail, "does not exist") || s.Conntrack != nil {
		t.Errorf("missing file: %+v, conntrack %v", st, s.Conntrack)
	}
}

// BenchmarkFileSource collects a 100,000-entry listing, 80% DNATed, from a
// file, keeping the DNATed flows.
func BenchmarkFileSource(b *testing.B) {
	const n = 100000
	path := filepath.Join(b.TempDir(), "conntrack.txt")
	if err := os.WriteFile(path, benchListing(n, false), 0o644); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		s := &snapshot.Snapshot{}
		if err := (&FileSource{Path: path}).Collect(context.Background(), s); err != nil {
			b.Fatal(err)
		}
		if s.Conntrack.Seen != n || s.Conntrack.Len() != n-n/5 {
			b.Fatalf("seen %d kept %d", s.Conntrack.Seen, s.Conntrack.Len())
		}
	}
}

// The kept flows are what ParseText passed on, for every capture in
// testdata and for states the kernel's tables do not name: every field but
// the mark, which no rule reads, a backend's flows together.
func TestFileSourceKeepsEveryField(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil {
		t.Fatal(err)
	}
	odd := "tcp 6 5 LISTEN src=10.0.0.1 dst=10.0.0.2 sport=1 dport=2 src=10.0.0.2 dst=10.0.0.1 sport=2 dport=1\n" +
		"dccp 33 5 PARTOPEN src=10.0.0.1 dst=10.0.0.2 sport=1 dport=2 src=10.0.0.2 dst=10.0.0.1 sport=2 dport=1\n" +
		"tcp 6 5 SYN_SENT3 src=10.0.0.1 dst=10.0.0.2 sport=3 dport=2 src=10.0.0.2 dst=10.0.0.1 sport=2 dport=3 delta-time=12\n"
	files = append(files, writeListing(t, good+odd))
	for _, path := range files {
		if strings.HasSuffix(path, "-save.txt") {
			continue
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		want, _, err := parseListing(string(raw), path)
		if err != nil {
			t.Fatal(err)
		}
		s := collectFile(t, &FileSource{Path: path, Now: func() time.Time { return textNow }})
		got := s.Conntrack.Flows()
		if len(got) != len(want) || s.Conntrack.Seen != len(want) {
			t.Fatalf("%s: kept %d of %d, want all %d", path, len(got), s.Conntrack.Seen, len(want))
		}
		byFlow := func(a, b snapshot.Flow) int { return strings.Compare(describeFlow(&a), describeFlow(&b)) }
		for i := range want {
			want[i].Mark = 0
		}
		slices.SortFunc(got, byFlow)
		slices.SortFunc(want, byFlow)
		for i := range got {
			if !sameFlow(&got[i], &want[i]) {
				t.Errorf("%s: flow %d\n got %s\nwant %s", path, i, describeFlow(&got[i]), describeFlow(&want[i]))
			}
		}
	}
}

// A listing is not complete when it ends in the middle of a line (a copy
// cut short: its last entry may lack fields even where they parse), nor
// when it lists a flow twice (two captures joined): each says what is
// wrong, and nothing is kept.
func TestFileSourceRefusesCutAndRepeatedListings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, listing, want string
	}{
		{"cut at a field boundary", strings.TrimSuffix(good, "\n") + "\ntcp      6 431999 ESTABLISHED src=10.244.2.50 dst=10.96.20.21 sport=51006 dport=80 src=10.244.2.30 dst=10.244.2.50 sport=8080 dport=51006",
			"ends in the middle of a line (no newline after its last entry): it was cut short"},
		{"two captures joined", good + good, "is listed twice"},
	} {
		path := writeListing(t, tc.listing)
		s := &snapshot.Snapshot{}
		err := (&FileSource{Path: path, Now: func() time.Time { return textNow }}).Collect(context.Background(), s)
		if err == nil || !strings.Contains(err.Error(), tc.want) || s.Conntrack != nil {
			t.Errorf("%s: %v, kept %v; want %q and nothing kept", tc.name, err, s.Conntrack != nil, tc.want)
		}
	}
}

// A listing of many entries is parsed ahead of the rules' look at them:
// an entry listed twice far down is still reported at its own line, with
// its entry numbers (the earlier one found by reading the file again: only
// the tuples' hashes are kept as it is read), and what the parser reads
// after it is not kept; a cancelled read stops with the context's error.
func TestFileSourceLongListing(t *testing.T) {
	var b strings.Builder
	const n, dup = 5000, 4000
	for i := range n {
		port := 1024 + i
		if i == dup {
			port = 1024 + 7 // entry 8 again
		}
		fmt.Fprintf(&b, "tcp      6 431999 ESTABLISHED src=10.244.2.50 dst=10.96.20.21 sport=%d dport=80 src=10.244.2.30 dst=10.244.2.50 sport=8080 dport=%d [ASSURED] mark=0 use=1\n", port, port)
	}
	path := writeListing(t, b.String())
	src := &FileSource{Path: path, Now: func() time.Time { return textNow }}
	src.Narrow([]any{readerOf(func(*snapshot.Flow) bool { return true })})
	s := &snapshot.Snapshot{}
	err := src.Collect(context.Background(), s)
	want := fmt.Sprintf("%s:%d: the flow", path, dup+1)
	if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), fmt.Sprintf("(entries 8 and %d)", dup+1)) || s.Conntrack != nil {
		t.Errorf("%v; want an error beginning %q about entries 8 and %d, nothing kept", err, want, dup+1)
	}

	// From stdin, which cannot be read again, the earlier entry is not
	// named.
	stdin := &FileSource{Path: "-", Stdin: strings.NewReader(b.String()), Now: func() time.Time { return textNow }}
	stdin.Narrow([]any{readerOf(func(*snapshot.Flow) bool { return true })})
	err = stdin.Collect(context.Background(), s)
	if want := fmt.Sprintf("stdin:%d: the flow tcp 10.244.2.50:1031 -> 10.96.20.21:80 is listed twice (entry %d and an earlier one)", dup+1, dup+1); err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("from stdin: %v; want an error beginning %q", err, want)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := src.Collect(ctx, s); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}
