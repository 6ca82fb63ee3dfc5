package conntrack

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// FileSource reads a saved `conntrack -L` listing (any format ParseText
// reads) instead of the kernel's table: scan --conntrack-file FILE.
type FileSource struct {
	// Path is the listing to read; "-" reads Stdin.
	Path string
	// Stdin is read when Path is "-"; nil means os.Stdin.
	Stdin io.Reader
	// CapturedAt is when the listing was captured (scan --captured-at):
	// delta-time= fields count back from it, and the rules' proofs by a
	// flow's start time rest on it. Zero means the file's modification time
	// for a regular, non-empty file (a saved listing); the current time for
	// another file (a pipe, /proc/net/nf_conntrack, read live); and for
	// Stdin, unknown: flows get no start time, and no proof rests on one.
	CapturedAt time.Time
	// Now, when set, replaces all of that (tests).
	Now func() time.Time

	readers
	// clock says, after Collect, what the flows' ages count from.
	clock string
	// gc runs the collector eagerly while the last collection kept many
	// flows: the rules that read them, and the report, run after it.
	gc eagerGC
}

// Name returns Name ("conntrack").
func (f *FileSource) Name() string { return Name }

// Describe says how many entries the last collection read and kept.
func (f *FileSource) Describe(s *snapshot.Snapshot) string {
	d := f.describe(s)
	if d != "" && f.clock != "" {
		d += "; " + f.clock
	}
	return d
}

// Collect reads the whole listing and sets s.Conntrack to the kept flows
// and the number of entries read. On any error (no such file, an entry that
// does not parse, a listing cut short) it leaves s untouched.
func (f *FileSource) Collect(ctx context.Context, s *snapshot.Snapshot) error {
	keep := f.keep(s)
	var (
		r    io.Reader
		name string
		now  time.Time
	)
	switch f.Path {
	case "":
		return errors.New("no conntrack listing file given")
	case "-":
		r, name = f.Stdin, "stdin"
		if r == nil {
			r = os.Stdin
		}
		f.clock = "stdin without --captured-at: flow ages are unknown, so no finding rests on a flow's start time"
	default:
		file, err := os.Open(f.Path)
		if errors.Is(err, fs.ErrNotExist) {
			return &missingListing{path: f.Path, err: err}
		}
		if err != nil {
			return err
		}
		defer file.Close()
		now = time.Now()
		f.clock = "flow ages count from now (read live)"
		if st, err := file.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > 0 {
			now = st.ModTime()
			f.clock = "flow ages count from the file's modification time, " + now.UTC().Format(time.RFC3339) + " (--captured-at sets it)"
		}
		r, name = file, f.Path
	}
	if !f.CapturedAt.IsZero() {
		now = f.CapturedAt
		f.clock = "flow ages count from --captured-at " + now.UTC().Format(time.RFC3339)
	}
	if f.Now != nil {
		now, f.clock = f.Now(), ""
	}
	kept := &snapshot.Conntrack{}
	n := 0
	cr := &countingReader{r: r}
	// The hashes of the kept tuples, and no more: a listing of a million
	// stale flows holds a million, and which entry listed the first of
	// two is looked for again only when there are two (repeated).
	var tuples hashSet
	seed := maphash.MakeSeed()
	// A collection that fails leaves the collector as it was.
	collected, was := false, f.gc.on
	defer func() {
		if collected {
			f.gc.set(kept.Len() >= manyKept)
		} else {
			f.gc.set(was)
		}
	}()
	judge := func(fl *snapshot.Flow, line int) error {
		if keep(fl) {
			k := tupleHash(seed, fl)
			if tuples.add(k) {
				return &repeated{name: name, line: line, entry: n + 1, flow: describeTuple(fl), hash: k}
			}
			kept.Keep(fl)
			if kept.Len() == manyKept {
				// A listing of a node whose workloads all died: what is
				// kept is most of the heap; the collector runs eagerly
				// while the rest is read, and after, while the rules
				// read it.
				f.gc.set(true)
			}
		}
		n++
		return nil
	}
	seen, err := parseAhead(ctx, cr, name, now, judge)
	if rep := (*repeated)(nil); errors.As(err, &rep) && f.Path != "-" {
		rep.first = firstWithHash(ctx, f.Path, now, seed, rep.hash, rep.entry)
	}
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if seen == 0 {
		return &emptyListing{name: name, empty: cr.n == 0}
	}
	if cr.last != '\n' {
		return fmt.Errorf("conntrack listing %s ends in the middle of a line (no newline after its last entry): it was cut short while it was saved or copied, and its last entry may lack fields; capture it again", name)
	}
	kept.Seen = seen
	kept.Fit()
	s.Conntrack = kept
	collected = true
	if f.Path != "-" || !f.CapturedAt.IsZero() {
		s.CapturedAt = now
	}
	return nil
}

// parsedBatch is how many entries the parser hands over at a time.
const parsedBatch = 1024

// parseAhead parses the listing on a goroutine of its own and passes each
// entry, with its line, to judge on the calling goroutine, in order: the
// parsing and the rules' look at each flow run on two cores when there
// are two. An error from judge ends the parsing; it and the parser's are
// returned as ParseText returns them, the first in the listing first.
func parseAhead(ctx context.Context, r io.Reader, name string, now time.Time, judge func(*snapshot.Flow, int) error) (int, error) {
	type batch struct {
		flows []snapshot.Flow
		lines []int
	}
	full := make(chan batch, 2)
	free := make(chan batch, 3)
	for range 3 {
		free <- batch{make([]snapshot.Flow, 0, parsedBatch), make([]int, 0, parsedBatch)}
	}
	quit := make(chan struct{})
	errStop := errors.New("stopped")
	var seen int
	var parseErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(full)
		var cur batch
		take := func() bool {
			select {
			case cur = <-free:
				cur.flows, cur.lines = cur.flows[:0], cur.lines[:0]
				return true
			case <-quit:
				return false
			}
		}
		if !take() {
			return
		}
		seen, parseErr = parseText(r, name, now, func(fl *snapshot.Flow, line int) error {
			cur.flows = append(cur.flows, *fl)
			cur.lines = append(cur.lines, line)
			if len(cur.flows) < parsedBatch {
				return nil
			}
			select {
			case full <- cur:
			case <-quit:
				return errStop
			}
			if !take() {
				return errStop
			}
			return nil
		})
		if len(cur.flows) > 0 {
			select {
			case full <- cur:
			case <-quit:
			}
		}
	}()
	stop := func(err error) (int, error) {
		close(quit)
		<-done
		return seen, err
	}
	for b := range full {
		if err := ctx.Err(); err != nil {
			return stop(err)
		}
		for i := range b.flows {
			if err := judge(&b.flows[i], b.lines[i]); err != nil {
				return stop(err)
			}
		}
		free <- b
	}
	<-done
	return seen, parseErr
}

// ErrEmptyListing is wrapped by the error for a listing without a single
// entry. A node's table is never empty while it runs pods: such a listing
// is a capture that failed (conntrack run without root leaves an empty
// file and prints its error on the terminal), not a clean table.
var ErrEmptyListing = errors.New("no conntrack entries")

type emptyListing struct {
	name  string
	empty bool // not a byte, rather than only conntrack's summary
}

func (e *emptyListing) Error() string {
	what := "holds no conntrack entries (only conntrack's summary)"
	if e.empty {
		what = "is empty"
	}
	return fmt.Sprintf("conntrack listing %s %s: a node's table is never empty, so the capture failed "+
		"(conntrack -L run without root writes nothing and prints its error on the terminal). "+
		"Capture it on the node as root, in the host's network namespace: sudo conntrack -L -o extended,id > FILE", e.name, what)
}

func (e *emptyListing) Unwrap() error { return ErrEmptyListing }

// countingReader counts the bytes read through it, and keeps the last.
type countingReader struct {
	r    io.Reader
	n    int64
	last byte
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if n > 0 {
		c.last = p[n-1]
	}
	return n, err
}

// tupleHash hashes a flow's protocol, zone and original tuple.
func tupleHash(seed maphash.Seed, fl *snapshot.Flow) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	var b [4 + 2*16 + 4]byte
	b[0], b[1], b[2] = byte(fl.Proto), byte(fl.Zone>>8), byte(fl.Zone)
	src, dst := fl.Orig.Src.As16(), fl.Orig.Dst.As16()
	copy(b[4:], src[:])
	copy(b[20:], dst[:])
	b[36], b[37], b[38], b[39] = byte(fl.Orig.SrcPort>>8), byte(fl.Orig.SrcPort), byte(fl.Orig.DstPort>>8), byte(fl.Orig.DstPort)
	h.Write(b[:])
	return h.Sum64()
}

// repeated is the error of a listing that lists a flow twice: at line
// line, as entry entry, and first as entry first (0: not known, the
// listing was not a file to read again).
type repeated struct {
	name        string
	line, entry int
	flow        string
	hash        uint64
	first       int
}

func (e *repeated) Error() string {
	entries := fmt.Sprintf("entry %d and an earlier one", e.entry)
	if e.first > 0 {
		entries = fmt.Sprintf("entries %d and %d", e.first, e.entry)
	}
	return fmt.Sprintf("%s:%d: the flow %s is listed twice (%s): a table holds each flow once, so this listing joins two captures or repeats one; capture it again", e.name, e.line, e.flow, entries)
}

// firstWithHash reads the listing at path again, up to entry before, and
// returns the number of the first entry whose tuple has hash h; 0 when
// none does (the file changed since) or it cannot be read.
func firstWithHash(ctx context.Context, path string, now time.Time, seed maphash.Seed, h uint64, before int) int {
	file, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer file.Close()
	found, n := 0, 0
	stop := errors.New("found")
	parseAhead(ctx, file, path, now, func(fl *snapshot.Flow, _ int) error {
		n++
		if n >= before {
			return stop
		}
		if tupleHash(seed, fl) == h {
			found = n
			return stop
		}
		return nil
	})
	return found
}

// describeTuple names a flow by its original tuple.
func describeTuple(fl *snapshot.Flow) string {
	return fmt.Sprintf("%s %s -> %s", fl.Proto, netip.AddrPortFrom(fl.Orig.Src, fl.Orig.SrcPort), netip.AddrPortFrom(fl.Orig.Dst, fl.Orig.DstPort))
}

// missingListing is the error for a listing file that does not exist. It
// unwraps to the error of os.Open, and so to fs.ErrNotExist.
type missingListing struct {
	path string
	err  error
}

func (e *missingListing) Error() string {
	return "conntrack listing " + e.path + " does not exist; save one on the node with: conntrack -L -o extended,id > FILE"
}

func (e *missingListing) Unwrap() error { return e.err }
