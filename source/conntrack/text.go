package conntrack

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// The text that `conntrack -L` prints (conntrack-tools 1.4.7, through
// libnetfilter_conntrack's default format) and that the kernel writes to
// /proc/net/nf_conntrack is one entry a line:
//
//	[ipv4 2|ipv6 10] PROTO NUM [TIMEOUT] [STATE] ORIGINAL [zone-orig=Z]
//	[packets= bytes=] [UNREPLIED] REPLY [zone-reply=Z] [packets= bytes=]
//	[ASSURED|OFFLOAD|HW_OFFLOAD] [mark=M] [secmark=S] [secctx=C] [zone=Z]
//	[delta-time=D] [[start=CTIME] [stop=CTIME]] [helper=H] use=U [id=ID]
//	[labels=L,...]
//
// where each tuple is src= dst= followed, by protocol, by sport= dport=
// (TCP, UDP, SCTP, UDP-Lite, DCCP), type= code= id= (ICMP, ICMPv6) or
// srckey= dstkey= (GRE). The family prefix is printed by -o extended and by
// the kernel; id= at the end by -o id; delta-time= when the entry has a
// start timestamp (net.netfilter.nf_conntrack_timestamp was 1 when it was
// created); [start=...] by -o ktimestamp; the timeout is missing for
// offloaded entries. The kernel prints IPv6 addresses in full
// (fd00:0000:...), the tool compressed. conntrack writes its summary
// ("conntrack v1.4.7 (conntrack-tools): N flow entries have been shown.")
// to stderr; captured with 2>&1 it lands wherever stdout's buffer was last
// flushed: at the top of a short listing, in the middle of a line of a
// long one.

// maxTextLine bounds one line of a listing; a real entry is a few hundred
// bytes.
const maxTextLine = 1 << 20

// maxDeltaSeconds bounds delta-time= so that it fits a time.Duration.
const maxDeltaSeconds = (1<<63 - 1) / int64(time.Second)

// ParseText streams the entries of a `conntrack -L` listing read from r to
// fn, reusing one Flow: fn must not retain the pointer. It reads every
// format conntrack-tools 1.4.7 prints for the conntrack table (the default,
// -o extended, -o id, -o timestamp, -o ktimestamp and their combinations)
// and the kernel's /proc/net/nf_conntrack, and returns how many entries it
// passed to fn. fn may be nil to only count.
//
// Each entry fills every field of the Flow: Proto from the protocol
// number; Orig and Reply from the two tuples; State, the TCP, SCTP or DCCP
// state word exactly as printed; Status, StatusAssured for [ASSURED] and
// StatusSeenReply unless [UNREPLIED] (no other bit is printed); Timeout;
// Mark; Zone from zone=, zone-orig= or zone-reply= (one entry has one zone
// ID, whichever direction it applies to); ID from id=; and Start, now minus
// delta-time= seconds. now is when the listing was captured; zero when
// that is unknown, and then no flow gets a start time.
//
// Entries of every protocol are passed on. ICMP and ICMPv6 entries have
// zero ports (their type=, code= and id= are checked but not kept); GRE
// entries carry their keys as ports, as the kernel reports them over
// netlink; entries of other protocols keep the ports they print, if any.
// Only TCP, UDP and SCTP tuples must have sport= and dport=.
//
// Blank lines and conntrack's own "N flow entries have been shown" summary
// are skipped, including one that 2>&1 spliced into the middle of an entry;
// when a listing holds such summaries, the entries must add up to them.
// Unknown key=value fields and bracketed flags ([OFFLOAD], [HW_OFFLOAD],
// [start=...], secctx=, labels=, helper=, use=, packets=, ...) are ignored.
//
// Errors read "<name>:<line>: <what is wrong>": a line that is not a
// conntrack entry, an invalid address or number, a port above 65535, a
// missing tuple field, addresses of both families in one entry, any other
// message from conntrack, an incomplete listing. An error returned by fn is
// wrapped the same way. seen counts the entries passed to fn before the
// error.
func ParseText(r io.Reader, name string, now time.Time, fn func(*snapshot.Flow) error) (seen int, err error) {
	if fn == nil {
		return parseText(r, name, now, nil)
	}
	return parseText(r, name, now, func(f *snapshot.Flow, _ int) error { return fn(f) })
}

// parseText is ParseText, passing fn each entry's line too.
func parseText(r io.Reader, name string, now time.Time, fn func(*snapshot.Flow, int) error) (seen int, err error) {
	p := textParser{name: name, now: now}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxTextLine)
	var (
		line      int    // the physical line just read
		carry     []byte // the start of an entry that a conntrack message cut short
		carryLine int    // its line; 0 when there is none
		shown     int    // the sum of the "N flow entries have been shown" summaries
		shownLine int    // the last summary's line; 0 when there is none
	)
	for sc.Scan() {
		line++
		b, at, joined := sc.Bytes(), line, carryLine != 0
		if joined {
			carry = append(carry, b...)
			b, at, carryLine = carry, carryLine, 0
		}
		if i := bytes.Index(b, toolPrefix); i >= 0 && bytes.Contains(b[i:], toolTag) {
			n, err := p.toolMessage(b[i:], line)
			if err != nil {
				return seen, err
			}
			shown += n
			shownLine = line
			// What precedes the message is the start of an entry whose rest
			// is the next line. conntrack prints one message at the end of
			// its listing, so it cannot cut an entry twice.
			if !isBlank(b[:i]) {
				if joined {
					return seen, fmt.Errorf("%s:%d: a second conntrack message inside the entry of line %d", name, line, at)
				}
				carry = append(carry[:0], b[:i]...)
				carryLine = at
			}
			continue
		}
		if isBlank(b) {
			continue
		}
		if err := p.entry(b, at); err != nil {
			return seen, err
		}
		seen++
		if fn != nil {
			if err := fn(&p.flow, at); err != nil {
				return seen, fmt.Errorf("%s:%d: %w", name, at, err)
			}
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return seen, fmt.Errorf("%s:%d: line longer than %d bytes: not a conntrack listing", name, line+1, maxTextLine)
		}
		return seen, fmt.Errorf("%s:%d: %w", name, line+1, err)
	}
	if carryLine != 0 {
		if err := p.entry(carry, carryLine); err != nil {
			return seen, err
		}
		seen++
		if fn != nil {
			if err := fn(&p.flow, carryLine); err != nil {
				return seen, fmt.Errorf("%s:%d: %w", name, carryLine, err)
			}
		}
	}
	if shownLine != 0 && shown != seen {
		return seen, fmt.Errorf("%s:%d: conntrack reported %d flow entries shown but the listing holds %d: it is incomplete or was filtered after it was captured",
			name, shownLine, shown, seen)
	}
	return seen, nil
}

var (
	toolPrefix = []byte("conntrack v")
	toolTag    = []byte(" (conntrack-tools): ")
	shownTail  = []byte(" flow entries have been shown.")
)

// toolMessage reads a message conntrack printed on stderr,
// "conntrack vVERSION (conntrack-tools): MESSAGE", and returns the count of
// the summary of a listing. Any other message is an error: it is what the
// tool said instead of listing the table.
func (p *textParser) toolMessage(b []byte, line int) (int, error) {
	msg := b[bytes.Index(b, toolTag)+len(toolTag):]
	msg = bytes.TrimRight(msg, " \t\r")
	if n, ok := bytes.CutSuffix(msg, shownTail); ok {
		if v, ok := parseDec(n, 1<<31-1); ok {
			return int(v), nil
		}
	}
	return 0, fmt.Errorf("%s:%d: conntrack reported %q instead of flow entries", p.name, line, clipText(msg))
}

// textParser holds the state of one ParseText call: the reused Flow and
// what the current entry has shown so far.
type textParser struct {
	name string
	now  time.Time
	flow snapshot.Flow

	line int  // the line being parsed
	is6  bool // the entry's family, once known
	fam  bool // whether it is known
}

func (p *textParser) errorf(format string, args ...any) error {
	return fmt.Errorf("%s:%d: "+format, append([]any{p.name, p.line}, args...)...)
}

// Tuple keys, as bits of a set.
const (
	keySrc uint16 = 1 << iota
	keyDst
	keySport
	keyDport
	keyType
	keyCode
	keyICMPID
	keySrcKey
	keyDstKey
)

var tupleKeyNames = [...]string{"src", "dst", "sport", "dport", "type", "code", "id", "srckey", "dstkey"}

const (
	textProtoICMP   = 1
	textProtoGRE    = 47
	textProtoICMPv6 = 58
)

// tupleKey returns the bit of key if it belongs in a tuple of proto, and 0
// if not. Only ICMP tuples have id=, so that -o id's id= after the reply
// tuple is the entry's.
func tupleKey(proto snapshot.Proto, key []byte) uint16 {
	switch string(key) {
	case "src":
		return keySrc
	case "dst":
		return keyDst
	}
	switch proto {
	case textProtoICMP, textProtoICMPv6:
		switch string(key) {
		case "type":
			return keyType
		case "code":
			return keyCode
		case "id":
			return keyICMPID
		}
	case textProtoGRE:
		switch string(key) {
		case "srckey":
			return keySrcKey
		case "dstkey":
			return keyDstKey
		}
	default:
		switch string(key) {
		case "sport":
			return keySport
		case "dport":
			return keyDport
		}
	}
	return 0
}

// requiredKeys are the fields every tuple of proto must have.
func requiredKeys(proto snapshot.Proto) uint16 {
	switch proto {
	case snapshot.ProtoTCP, snapshot.ProtoUDP, snapshot.ProtoSCTP:
		return keySrc | keyDst | keySport | keyDport
	}
	return keySrc | keyDst
}

// Where the parser is in an entry.
const (
	beforeOrig = iota
	inOrig
	betweenTuples
	inReply
	afterReply
)

var tupleNames = [...]string{inOrig: "original", inReply: "reply"}

// zoneKeys are the names of the fields that set Flow.Zone.
var zoneKeys = [...]string{"zone", "zone-orig", "zone-reply"}

// entry parses one line into p.flow.
func (p *textParser) entry(line []byte, at int) error {
	f := &p.flow
	*f = snapshot.Flow{}
	p.line, p.fam, p.is6 = at, false, false

	tok, rest := nextField(line)
	if string(tok) == "ipv4" || string(tok) == "ipv6" {
		want := "2"
		if tok[3] == '6' {
			want = "10"
		}
		num, r := nextField(rest)
		if string(num) != want {
			return p.errorf("%s must be followed by its number %s, not %q", tok, want, clipText(num))
		}
		p.fam, p.is6 = true, tok[3] == '6'
		tok, rest = nextField(r)
	}
	if !isProtoName(tok) {
		return p.notEntry(line)
	}
	name := tok
	tok, rest = nextField(rest)
	num, ok := parseDec(tok, 255)
	if !ok {
		if !p.fam {
			return p.notEntry(line)
		}
		return p.errorf("%s: %q is not a protocol number", name, clipText(tok))
	}
	if want, known := protoNumbers[string(name)]; known && want != uint8(num) {
		return p.errorf("protocol %s has number %d, not %d", name, want, num)
	}
	f.Proto = snapshot.Proto(num)

	tok, rest = nextField(rest)
	if allDigits(tok) {
		v, ok := parseDec(tok, 1<<32-1)
		if !ok {
			return p.errorf("timeout %s out of range", clipText(tok))
		}
		f.Timeout = uint32(v)
		tok, rest = nextField(rest)
	}
	if len(tok) > 0 && tok[0] != '[' && bytes.IndexByte(tok, '=') < 0 {
		if !isStateWord(tok) {
			return p.errorf("unexpected %q before the original tuple", clipText(tok))
		}
		f.State = internState(tok)
		tok, rest = nextField(rest)
	}

	phase := beforeOrig
	var keys uint16 // the keys the current tuple has shown
	var t *snapshot.Tuple
	unreplied, assured := false, false
	zoneFrom := -1 // the index in zoneKeys of the field that set f.Zone
	for ; len(tok) > 0; tok, rest = nextField(rest) {
		if tok[0] == '[' {
			// A flag, or a group such as [start=Sun Nov 22 17:15:40 2026]
			// that spans fields.
			if tok[len(tok)-1] != ']' {
				for {
					var more []byte
					if more, rest = nextField(rest); len(more) == 0 {
						return p.errorf("%q is not closed by ]", clipText(tok))
					}
					if more[len(more)-1] == ']' {
						break
					}
				}
			}
			switch string(tok) {
			case "[UNREPLIED]":
				unreplied = true
			case "[ASSURED]":
				assured = true
			}
			if phase == inOrig || phase == inReply {
				if err := p.endTuple(phase, keys); err != nil {
					return err
				}
				phase++
			}
			continue
		}
		eq := bytes.IndexByte(tok, '=')
		if eq <= 0 {
			return p.errorf("unexpected %q: not a key=value field", clipText(tok))
		}
		key, val := tok[:eq], tok[eq+1:]
		if phase == inOrig || phase == inReply {
			if bit := tupleKey(f.Proto, key); bit != 0 && keys&bit == 0 {
				keys |= bit
				if err := p.tupleField(t, bit, val, phase); err != nil {
					return err
				}
				continue
			}
			// A field of another kind, or a key again: the tuple is over.
			if err := p.endTuple(phase, keys); err != nil {
				return err
			}
			phase++
		}
		if string(key) == "src" {
			switch phase {
			case beforeOrig:
				phase, t = inOrig, &f.Orig
			case betweenTuples:
				phase, t = inReply, &f.Reply
			default:
				return p.errorf("a third tuple: src=%s after the reply tuple", clipText(val))
			}
			keys = keySrc
			if err := p.tupleField(t, keySrc, val, phase); err != nil {
				return err
			}
			continue
		}
		if phase == beforeOrig {
			if tupleKey(f.Proto, key) != 0 {
				return p.errorf("the original tuple does not start with src= (found %s=)", clipText(key))
			}
			continue // e.g. "timeout=0, stream_timeout=0" of a GRE entry in /proc
		}
		switch string(key) {
		case "mark":
			v, ok := parseDec(val, 1<<32-1)
			if !ok {
				return p.errorf("invalid mark=%s: not a 32-bit number", clipText(val))
			}
			f.Mark = uint32(v)
		case "zone", "zone-orig", "zone-reply":
			v, ok := parseDec(val, 1<<16-1)
			if !ok {
				return p.errorf("invalid %s=%s: not a zone number (0-65535)", key, clipText(val))
			}
			k := 0
			for string(key) != zoneKeys[k] {
				k++
			}
			if zoneFrom >= 0 && uint16(v) != f.Zone {
				return p.errorf("%s=%d disagrees with %s=%d: an entry has one zone", key, v, zoneKeys[zoneFrom], f.Zone)
			}
			f.Zone, zoneFrom = uint16(v), k
		case "id":
			v, ok := parseDec(val, 1<<32-1)
			if !ok {
				return p.errorf("invalid id=%s: not a 32-bit number", clipText(val))
			}
			f.ID = uint32(v)
		case "delta-time":
			v, ok := parseDec(val, uint64(maxDeltaSeconds))
			if !ok {
				return p.errorf("invalid delta-time=%s: not a number of seconds", clipText(val))
			}
			if !p.now.IsZero() {
				// Without the capture time, an age says nothing of when.
				f.Start = p.now.Add(-time.Duration(v) * time.Second)
			}
		}
	}
	switch phase {
	case beforeOrig:
		return p.errorf("no original tuple (src= dst= ...)")
	case inOrig, inReply:
		if err := p.endTuple(phase, keys); err != nil {
			return err
		}
		phase++
	}
	if phase < afterReply {
		return p.errorf("no reply tuple after the original one")
	}
	if assured {
		f.Status |= snapshot.StatusAssured
	}
	if !unreplied {
		f.Status |= snapshot.StatusSeenReply
	}
	return nil
}

// tupleField sets the field bit of t, in the tuple of phase, from val.
func (p *textParser) tupleField(t *snapshot.Tuple, bit uint16, val []byte, phase int) error {
	switch bit {
	case keySrc, keyDst:
		a, ok := parseTextAddr(val)
		if !ok {
			return p.errorf("invalid %s=%s in the %s tuple: not an IP address", tupleKeyName(bit), clipText(val), tupleNames[phase])
		}
		if !p.fam {
			p.fam, p.is6 = true, a.Is6()
		} else if a.Is6() != p.is6 {
			return p.errorf("%s=%s in the %s tuple is %s in an %s entry", tupleKeyName(bit), a, tupleNames[phase], familyName(a.Is6()), familyName(p.is6))
		}
		if bit == keySrc {
			t.Src = a
		} else {
			t.Dst = a
		}
	case keySport, keyDport:
		v, ok := parseDec(val, 1<<16-1)
		if !ok {
			return p.errorf("invalid %s=%s in the %s tuple: not a port (0-65535)", tupleKeyName(bit), clipText(val), tupleNames[phase])
		}
		if bit == keySport {
			t.SrcPort = uint16(v)
		} else {
			t.DstPort = uint16(v)
		}
	case keySrcKey, keyDstKey:
		v, ok := parseGREKey(val)
		if !ok {
			return p.errorf("invalid %s=%s in the %s tuple: not a GRE key (0x0-0xffff)", tupleKeyName(bit), clipText(val), tupleNames[phase])
		}
		if bit == keySrcKey {
			t.SrcPort = v
		} else {
			t.DstPort = v
		}
	case keyType, keyCode:
		if _, ok := parseDec(val, 255); !ok {
			return p.errorf("invalid %s=%s in the %s tuple: not an ICMP %s (0-255)", tupleKeyName(bit), clipText(val), tupleNames[phase], tupleKeyName(bit))
		}
	case keyICMPID:
		if _, ok := parseDec(val, 1<<16-1); !ok {
			return p.errorf("invalid id=%s in the %s tuple: not an ICMP id (0-65535)", clipText(val), tupleNames[phase])
		}
	}
	return nil
}

// endTuple checks that the tuple of phase has every field it needs.
func (p *textParser) endTuple(phase int, keys uint16) error {
	missing := requiredKeys(p.flow.Proto) &^ keys
	if missing == 0 {
		return nil
	}
	return p.errorf("the %s tuple has no %s=", tupleNames[phase], tupleKeyName(missing&-missing))
}

func tupleKeyName(bit uint16) string {
	for i := range tupleKeyNames {
		if bit == 1<<i {
			return tupleKeyNames[i]
		}
	}
	return "?"
}

func familyName(is6 bool) string {
	if is6 {
		return "IPv6"
	}
	return "IPv4"
}

// notEntry explains a line that does not start like a conntrack entry.
func (p *textParser) notEntry(line []byte) error {
	line = bytes.TrimLeft(line, " \t")
	hint := ""
	switch {
	case line[0] == '[':
		hint = " (conntrack -E prints events, not the table)"
	case line[0] == '<':
		hint = " (-o xml is not read: capture conntrack -L -o extended)"
	case line[0] == '-':
		hint = " (-o save is not read: capture conntrack -L -o extended)"
	}
	return p.errorf("not a conntrack entry: %q%s", clipText(line), hint)
}

// protoNumbers are the protocol names conntrack and the kernel print, and
// their numbers.
var protoNumbers = map[string]uint8{
	"icmp": 1, "tcp": 6, "udp": 17, "dccp": 33, "gre": 47, "icmpv6": 58,
	"sctp": 132, "udplite": 136,
}

// textStates are the state words conntrack and the kernel print for TCP,
// SCTP and DCCP, so that a State does not cost an allocation per entry.
var textStates = [...]string{
	"NONE", "SYN_SENT", "SYN_RECV", "ESTABLISHED", "FIN_WAIT", "CLOSE_WAIT",
	"LAST_ACK", "TIME_WAIT", "CLOSE", "SYN_SENT2", "LISTEN",
	"CLOSED", "COOKIE_WAIT", "COOKIE_ECHOED", "SHUTDOWN_SENT", "SHUTDOWN_RECD",
	"SHUTDOWN_ACK_SENT", "HEARTBEAT_SENT", "HEARTBEAT_ACKED",
	"REQUEST", "RESPOND", "PARTOPEN", "OPEN", "CLOSEREQ", "CLOSING", "TIMEWAIT",
	"IGNORE", "INVALID",
}

func internState(b []byte) string {
	for _, s := range textStates {
		if string(b) == s {
			return s
		}
	}
	return string(b)
}

// isStateWord reports whether b looks like a state: a capital, then
// capitals, digits and underscores.
func isStateWord(b []byte) bool {
	if len(b) == 0 || b[0] < 'A' || b[0] > 'Z' {
		return false
	}
	for _, c := range b {
		if !('A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// isProtoName reports whether b looks like a protocol name: a lower-case
// letter, then lower-case letters and digits.
func isProtoName(b []byte) bool {
	if len(b) == 0 || len(b) > 16 || b[0] < 'a' || b[0] > 'z' {
		return false
	}
	for _, c := range b {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// nextField returns the first field of s, separated by spaces or tabs, and
// what follows it; an empty field when s holds no more.
func nextField(s []byte) (field, rest []byte) {
	i := 0
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	j := i
	for j < len(s) && s[j] != ' ' && s[j] != '\t' {
		j++
	}
	return s[i:j], s[j:]
}

func isBlank(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\r' {
			return false
		}
	}
	return true
}

func allDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(b) > 0
}

// parseDec parses a decimal number of at most max.
func parseDec(b []byte, max uint64) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (max-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

// parseGREKey parses a GRE key as printed, 0x and up to four hex digits.
func parseGREKey(b []byte) (uint16, bool) {
	h, ok := bytes.CutPrefix(b, []byte("0x"))
	if !ok || len(h) == 0 || len(h) > 4 {
		return 0, false
	}
	var v uint16
	for _, c := range h {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | uint16(c)
	}
	return v, true
}

// parseTextAddr parses an IPv4 or IPv6 address without allocating. It
// accepts what netip.ParseAddr accepts but zones (fe80::1%eth0), which
// conntrack does not print.
func parseTextAddr(b []byte) (netip.Addr, bool) {
	if bytes.IndexByte(b, ':') < 0 {
		return parseIPv4(b)
	}
	return parseIPv6(b)
}

// parseIPv6 follows netip.ParseAddr: up to eight groups of one to four hex
// digits, one :: standing for at least one group of zeros, and optionally
// an IPv4 address in place of the last two groups.
func parseIPv6(b []byte) (netip.Addr, bool) {
	var ip [16]byte
	ellipsis := -1 // where the :: is in ip
	if len(b) >= 2 && b[0] == ':' && b[1] == ':' {
		ellipsis = 0
		b = b[2:]
		if len(b) == 0 {
			return netip.IPv6Unspecified(), true
		}
	}
	i := 0
	for i < 16 {
		off, acc := 0, uint32(0)
		for ; off < len(b); off++ {
			c := b[off]
			switch {
			case '0' <= c && c <= '9':
				acc = acc<<4 + uint32(c-'0')
			case 'a' <= c && c <= 'f':
				acc = acc<<4 + uint32(c-'a'+10)
			case 'A' <= c && c <= 'F':
				acc = acc<<4 + uint32(c-'A'+10)
			default:
				goto groupEnd
			}
			if off > 3 {
				return netip.Addr{}, false
			}
		}
	groupEnd:
		if off == 0 {
			return netip.Addr{}, false
		}
		if off < len(b) && b[off] == '.' {
			// An IPv4 address ends it, in place of the last two groups.
			if ellipsis < 0 && i != 12 || i+4 > 16 {
				return netip.Addr{}, false
			}
			v4, ok := parseIPv4(b)
			if !ok {
				return netip.Addr{}, false
			}
			a4 := v4.As4()
			copy(ip[i:], a4[:])
			b = nil
			i += 4
			break
		}
		ip[i], ip[i+1] = byte(acc>>8), byte(acc)
		i += 2
		b = b[off:]
		if len(b) == 0 {
			break
		}
		if b[0] != ':' || len(b) == 1 {
			return netip.Addr{}, false
		}
		b = b[1:]
		if b[0] == ':' {
			if ellipsis >= 0 {
				return netip.Addr{}, false
			}
			ellipsis = i
			b = b[1:]
			if len(b) == 0 {
				break
			}
		}
	}
	if len(b) != 0 {
		return netip.Addr{}, false
	}
	if i < 16 {
		if ellipsis < 0 {
			return netip.Addr{}, false
		}
		n := 16 - i
		for j := i - 1; j >= ellipsis; j-- {
			ip[j+n] = ip[j]
		}
		clear(ip[ellipsis : ellipsis+n])
	} else if ellipsis >= 0 {
		return netip.Addr{}, false
	}
	return netip.AddrFrom16(ip), true
}

// parseIPv4 accepts what netip.ParseAddr accepts for IPv4: four decimal
// fields of 0-255 without leading zeros.
func parseIPv4(b []byte) (netip.Addr, bool) {
	var out [4]byte
	field, digits, v := 0, 0, 0
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9':
			if digits == 1 && v == 0 {
				return netip.Addr{}, false
			}
			v = v*10 + int(c-'0')
			digits++
			if v > 255 {
				return netip.Addr{}, false
			}
		case c == '.':
			if digits == 0 || field == 3 {
				return netip.Addr{}, false
			}
			out[field] = byte(v)
			field, digits, v = field+1, 0, 0
		default:
			return netip.Addr{}, false
		}
	}
	if field != 3 || digits == 0 {
		return netip.Addr{}, false
	}
	out[3] = byte(v)
	return netip.AddrFrom4(out), true
}

// clip shortens what an error quotes.
func clipText(b []byte) []byte {
	const max = 64
	if len(b) > max {
		return append(b[:max:max], "..."...)
	}
	return b
}
