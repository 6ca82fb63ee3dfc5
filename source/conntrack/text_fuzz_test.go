package conntrack

import (
	"bytes"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// fuzzSeeds are malformed and unusual lines for the fuzzer to start from,
// next to the captures in testdata.
var fuzzSeeds = []string{
	good,
	good + good + "conntrack v1.4.7 (conntrack-tools): 2 flow entries have been shown.\n",
	"tcp 6 100 src=10.0.0.1 dst=10.0.0.2 sport=1 dport=2 pac" + "conntrack v1.4.7 (conntrack-tools): 1 flow entries have been shown.\n" + "kets=0 src=10.0.0.2 dst=10.0.0.1 sport=2 dport=1\n",
	"tcp 6 100 src=10.0.0.256 dst=10.0.0.2 sport=1 dport=2 src=10.0.0.2 dst=10.0.0.1 sport=2 dport=1\n",
	"tcp 6 100 src=10.0.0.1 dst=10.0.0.2 sport=1 dport=65536 src=10.0.0.2 dst=10.0.0.1 sport=2 dport=1\n",
	"tcp 6 100 src=10.0.0.1 dst=10.0.0.2 sport=1 src=10.0.0.2 dst=10.0.0.1 sport=2 dport=1\n",
	"ipv6 10 udp 17 29 src=fd00::1 dst=fd00:0000:0000:0000:0000:0000:0000:0002 sport=1 dport=2 [UNREPLIED] src=::ffff:1.2.3.4 dst=fd00::1 sport=2 dport=1 zone-orig=3\n",
	"icmp 1 29 src=10.0.0.1 dst=10.0.0.2 type=8 code=0 id=1 src=10.0.0.2 dst=10.0.0.1 type=0 code=0 id=1 id=5\n",
	"gre 47 29 timeout=0, stream_timeout=0 src=10.0.0.1 dst=10.0.0.2 srckey=0x1 dstkey=0xffff src=10.0.0.2 dst=10.0.0.1 srckey=0xffff dstkey=0x1\n",
	"tcp 6 ESTABLISHED src=10.0.0.1 dst=10.0.0.2 sport=1 dport=2 src=10.0.0.2 dst=10.0.0.1 sport=2 dport=1 [OFFLOAD] delta-time=5 [start=Sun Nov  2 07:05:40 2026] id=3\n",
	"[NEW] tcp 6 120 SYN_SENT src=10.0.0.1 dst=10.0.0.2 sport=1 dport=2 [UNREPLIED] src=10.0.0.2 dst=10.0.0.1 sport=2 dport=1\n",
	"conntrack v1.4.7 (conntrack-tools): Operation failed: Operation not permitted\n",
	"-A -t 3596 -u SEEN_REPLY -s 10.0.0.1 -d 10.0.0.2\n",
	"\r\n\t \n",
}

// FuzzParseText checks that no input makes ParseText panic, that every
// error names the input and a line, that the same input read a byte at a
// time gives the same result, and that each entry it passes on has
// addresses of one family and reads back the same when printed as
// `conntrack -L -o extended,id` would print it.
func FuzzParseText(f *testing.F) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil {
		f.Fatal(err)
	}
	for _, path := range files {
		raw, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var flows []snapshot.Flow
		seen, err := ParseText(bytes.NewReader(in), "fuzz.txt", textNow, func(fl *snapshot.Flow) error {
			flows = append(flows, *fl)
			return nil
		})
		if seen != len(flows) {
			t.Fatalf("seen %d, %d calls", seen, len(flows))
		}
		if err != nil {
			checkErrorPosition(t, err, in)
		}

		// Read in small pieces: the same.
		var again []snapshot.Flow
		seen2, err2 := ParseText(&smallReads{in: in}, "fuzz.txt", textNow, func(fl *snapshot.Flow) error {
			again = append(again, *fl)
			return nil
		})
		if seen2 != seen || fmt.Sprint(err2) != fmt.Sprint(err) {
			t.Fatalf("in small reads: %d, %v; at once: %d, %v", seen2, err2, seen, err)
		}
		for i := range flows {
			if !sameFlow(&flows[i], &again[i]) {
				t.Fatalf("flow %d in small reads:\n%s\nat once:\n%s", i, describeFlow(&again[i]), describeFlow(&flows[i]))
			}
		}

		for i := range flows {
			fl := &flows[i]
			addrs := []netip.Addr{fl.Orig.Src, fl.Orig.Dst, fl.Reply.Src, fl.Reply.Dst}
			for _, a := range addrs {
				if !a.IsValid() || a.Is4() != addrs[0].Is4() || a.Zone() != "" {
					t.Fatalf("flow %d: addresses %v", i, addrs)
				}
			}
			if fl.Status&^(snapshot.StatusAssured|snapshot.StatusSeenReply) != 0 {
				t.Fatalf("flow %d: status %#x", i, fl.Status)
			}
			line := printEntry(fl)
			p := textParser{name: "printed", now: textNow}
			if err := p.entry([]byte(line), 1); err != nil {
				t.Fatalf("flow %d printed as %q: %v", i, line, err)
			}
			if !sameFlow(&p.flow, fl) {
				t.Fatalf("flow %d printed as %q reads back as\n%s\nnot\n%s", i, line, describeFlow(&p.flow), describeFlow(fl))
			}
		}
	})
}

// smallReads returns in in pieces of 1 to 13 bytes.
type smallReads struct {
	in []byte
	n  int
}

func (r *smallReads) Read(b []byte) (int, error) {
	if len(r.in) == 0 {
		return 0, io.EOF
	}
	r.n = r.n%13 + 1
	n := copy(b[:min(len(b), r.n)], r.in)
	r.in = r.in[n:]
	return n, nil
}

// checkErrorPosition fails unless err reads "fuzz.txt:LINE: ..." with a
// line of the input (or the one after its last, for an error at the end).
func checkErrorPosition(t *testing.T, err error, in []byte) {
	t.Helper()
	msg := err.Error()
	rest, ok := strings.CutPrefix(msg, "fuzz.txt:")
	if !ok {
		t.Fatalf("error %q does not start with the name", msg)
	}
	n, i := 0, 0
	for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' && i < 10 {
		n = n*10 + int(rest[i]-'0')
		i++
	}
	if i == 0 || !strings.HasPrefix(rest[i:], ": ") || len(rest) == i+2 {
		t.Fatalf("error %q does not go on with a line number and a message", msg)
	}
	if lines := bytes.Count(in, []byte("\n")) + 1; n < 1 || n > lines {
		t.Fatalf("error %q at line %d of an input of %d lines", msg, n, lines)
	}
}

// printEntry renders f as `conntrack -L -o extended,id` prints an entry.
func printEntry(f *snapshot.Flow) string {
	var b strings.Builder
	if f.Orig.Src.Is4() {
		b.WriteString("ipv4     2 ")
	} else {
		b.WriteString("ipv6     10 ")
	}
	name := "unknown"
	for n, p := range protoNumbers {
		if snapshot.Proto(p) == f.Proto {
			name = n
		}
	}
	fmt.Fprintf(&b, "%-8s %d %d ", name, f.Proto, f.Timeout)
	if f.State != "" {
		b.WriteString(f.State + " ")
	}
	tuple := func(t *snapshot.Tuple) {
		fmt.Fprintf(&b, "src=%s dst=%s ", t.Src, t.Dst)
		switch f.Proto {
		case textProtoICMP, textProtoICMPv6:
			b.WriteString("type=0 code=0 id=0 ")
		case textProtoGRE:
			fmt.Fprintf(&b, "srckey=0x%x dstkey=0x%x ", t.SrcPort, t.DstPort)
		default:
			fmt.Fprintf(&b, "sport=%d dport=%d ", t.SrcPort, t.DstPort)
		}
	}
	tuple(&f.Orig)
	if f.Status&snapshot.StatusSeenReply == 0 {
		b.WriteString("[UNREPLIED] ")
	}
	tuple(&f.Reply)
	if f.Status&snapshot.StatusAssured != 0 {
		b.WriteString("[ASSURED] ")
	}
	fmt.Fprintf(&b, "mark=%d ", f.Mark)
	if f.Zone != 0 {
		fmt.Fprintf(&b, "zone=%d ", f.Zone)
	}
	if !f.Start.IsZero() {
		fmt.Fprintf(&b, "delta-time=%d ", textNow.Sub(f.Start)/time.Second)
	}
	b.WriteString("use=1")
	if f.ID != 0 {
		fmt.Fprintf(&b, " id=%d", f.ID)
	}
	return b.String()
}

// FuzzTextAddr checks the address parser against netip.ParseAddr.
func FuzzTextAddr(f *testing.F) {
	for _, s := range []string{"10.244.1.50", "0.0.0.0", "255.255.255.255", "01.2.3.4", "1.2.3", "1.2.3.4.5", "256.1.1.1",
		"fd00::1", "fd00:0000:0000:0000:0000:0000:0000:0001", "::ffff:10.0.0.1", "fe80::1%eth0", "", "::", "1::2::3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := parseTextAddr([]byte(s))
		want, err := netip.ParseAddr(s)
		if want.Zone() != "" {
			// Zones are not part of what conntrack prints.
			if ok {
				t.Fatalf("parseTextAddr(%q) = %v, want an error for a zone", s, got)
			}
			return
		}
		if ok != (err == nil) || ok && got != want {
			t.Fatalf("parseTextAddr(%q) = %v, %v; netip.ParseAddr: %v, %v", s, got, ok, want, err)
		}
	})
}
