package conntrack

import (
	"bufio"
	"fmt"
	"io"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// TextWriter writes flows as `conntrack -L -o extended,id` prints them,
// one line each, so that what ParseText reads back is the flow written: its
// protocol, state, timeout, both tuples, UNREPLIED and ASSURED, mark, zone,
// ID, and (as delta-time= from capturedAt) its start when known. What the
// text cannot say (ICMP's type, code and id, which no rule reads) is left
// out.
type TextWriter struct {
	w          *bufio.Writer
	capturedAt time.Time
}

// NewTextWriter returns a writer of flows to w, their ages counted from
// capturedAt.
func NewTextWriter(w io.Writer, capturedAt time.Time) *TextWriter {
	return &TextWriter{w: bufio.NewWriter(w), capturedAt: capturedAt}
}

var protoNames = func() map[uint8]string {
	m := map[uint8]string{}
	for name, n := range protoNumbers {
		m[n] = name
	}
	return m
}()

// Write writes f.
func (t *TextWriter) Write(f *snapshot.Flow) error {
	fam, num := "ipv4", 2
	if f.Orig.Src.Is6() && !f.Orig.Src.Is4In6() {
		fam, num = "ipv6", 10
	}
	name, ok := protoNames[uint8(f.Proto)]
	if !ok {
		name = "unknown"
	}
	fmt.Fprintf(t.w, "%s     %d %-8s %d %d ", fam, num, name, f.Proto, f.Timeout)
	if f.State != "" {
		fmt.Fprintf(t.w, "%s ", f.State)
	}
	t.tuple(f.Proto, f.Orig)
	if f.Status&snapshot.StatusSeenReply == 0 {
		t.w.WriteString("[UNREPLIED] ")
	}
	t.tuple(f.Proto, f.Reply)
	if f.Status&snapshot.StatusAssured != 0 {
		t.w.WriteString("[ASSURED] ")
	}
	fmt.Fprintf(t.w, "mark=%d zone=%d ", f.Mark, f.Zone)
	if !f.Start.IsZero() && !t.capturedAt.IsZero() {
		age := max(t.capturedAt.Sub(f.Start).Round(time.Second), 0)
		fmt.Fprintf(t.w, "delta-time=%d ", int64(age/time.Second))
	}
	fmt.Fprintf(t.w, "use=1 id=%d\n", f.ID)
	return nil
}

func (t *TextWriter) tuple(proto snapshot.Proto, tu snapshot.Tuple) {
	fmt.Fprintf(t.w, "src=%s dst=%s ", tu.Src.Unmap(), tu.Dst.Unmap())
	switch proto {
	case textProtoICMP, textProtoICMPv6:
	case textProtoGRE:
		fmt.Fprintf(t.w, "srckey=0x%x dstkey=0x%x ", tu.SrcPort, tu.DstPort)
	default:
		fmt.Fprintf(t.w, "sport=%d dport=%d ", tu.SrcPort, tu.DstPort)
	}
}

// Flush writes what is buffered.
func (t *TextWriter) Flush() error { return t.w.Flush() }
