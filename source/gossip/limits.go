package gossip

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
)

// What one member list may hold. Reading it is bounded by what is decoded,
// not only by what is read: a list of 60 MB (under maxFile) of small
// members decoded whole took 580 MB, and one member's tags can be millions
// of entries. A list that holds more is refused, naming the bound, before
// the rest of it is decoded.
const (
	// MaxMembers bounds the members of one view: ten times the largest
	// clusters Consul and Serf document (10,000 agents), and about what
	// the controller holds in 100 MB.
	MaxMembers = 100_000
	// maxField bounds, in bytes, a member's name, address, status and
	// port as text, memberlist's meta, and each of its tags' key and
	// value: memberlist carries at most 512 bytes of meta (Serf's and
	// Consul's encoded tags), and a node name is a host name.
	maxField = 1024
	// maxTags bounds a member's tags: 512 bytes of meta hold fewer.
	maxTags = 256
	// maxValue bounds, in bytes, the text of one member, or of one field
	// of a list beside its members, as it is read: a member at the
	// bounds above is a few KiB of it. The decoder holds a value whole
	// before it decodes it.
	maxValue = 1 << 20
)

// errTooManyMembers is a list of more than MaxMembers members.
var errTooManyMembers = fmt.Errorf("more than %d members: a view is bounded to %d (a cluster ten times the largest Consul and Serf document), and the rest is not read", MaxMembers, MaxMembers)

// checkField refuses a member's field longer than maxField; what names it.
func checkField(what, s string) error {
	if len(s) > maxField {
		return fmt.Errorf("%s of %d bytes: more than %d, which no member's %s holds", what, len(s), maxField, what)
	}
	return nil
}

// short is s cut to 64 bytes, to quote in an error.
func short(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// tags are a member's tags, decoded with their bounds: at most maxTags,
// each key and value at most maxField bytes. A JSON null is none.
type tags map[string]string

// UnmarshalJSON decodes an object of strings, within the bounds: its
// pairs are counted on the text before any is decoded.
func (t *tags) UnmarshalJSON(b []byte) error {
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		*t = nil
		return nil
	}
	if n := pairs(b); n > maxTags {
		// Pairs, not keys: a key given a million times is a million
		// pairs to read.
		return fmt.Errorf("tags: more than %d, which no member's %d bytes of meta hold", maxTags, 512)
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		var typ *json.UnmarshalTypeError
		if errors.As(err, &typ) {
			return fmt.Errorf("tags: want an object of strings, got %s", typ.Value)
		}
		return err
	}
	for k, v := range m {
		if err := checkField("tag key", k); err != nil {
			return fmt.Errorf("tags: %w", err)
		}
		if err := checkField("tag value", v); err != nil {
			return fmt.Errorf("tags: %s: %w", short(k), err)
		}
	}
	*t = m
	return nil
}

// pairs counts the pairs of the JSON object b (its colons outside strings
// and nested values), reading its text alone.
func pairs(b []byte) int {
	n, depth := 0, 0
	inString, escaped := false, false
	for _, c := range b {
		switch {
		case inString && escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case inString:
			inString = c != '"'
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
		case c == ':' && depth == 1:
			n++
		}
	}
	return n
}

// jsonWord names the kind of a JSON token, for an error.
func jsonWord(t json.Token) string {
	switch t.(type) {
	case json.Delim:
		if t == json.Delim('[') {
			return "an array"
		}
		return "an object"
	case string:
		return "a string"
	case float64, json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return "null"
}

// jsonStream decodes a JSON member list as it is read, a value at a time,
// and places an error at its line.
type jsonStream struct {
	dec   *json.Decoder
	lines *lineCounter
}

func newJSONStream(r io.Reader) *jsonStream {
	lines := &lineCounter{r: r}
	return &jsonStream{dec: json.NewDecoder(lines), lines: lines}
}

// start is where the decoder's next value starts reading: after the
// white space, the comma or the colon that precede it, which it skips.
func (s *jsonStream) start() int64 {
	off := s.dec.InputOffset()
	buf := s.dec.Buffered()
	var c [1]byte
	for {
		if n, _ := buf.Read(c[:]); n == 0 {
			return off
		}
		switch c[0] {
		case ' ', '\t', '\r', '\n':
			off++
		case ',', ':':
			return off + 1
		default:
			return off
		}
	}
}

// decode decodes the next value into v, at most maxValue bytes of it.
func (s *jsonStream) decode(v any) error {
	start := s.start()
	s.lines.mark, s.lines.limit = start, maxValue
	if err := s.dec.Decode(v); err != nil {
		return s.placed(err, start)
	}
	return nil
}

// token reads the next token.
func (s *jsonStream) token() (json.Token, error) {
	start := s.start()
	t, err := s.dec.Token()
	if err != nil {
		return nil, s.placed(err, start)
	}
	return t, nil
}

// end refuses anything but white space after the value read.
func (s *jsonStream) end() error {
	at := s.start()
	if _, err := s.dec.Token(); err != io.EOF {
		return lineError(s.lines.lineAt(at), "more than one JSON value")
	}
	return nil
}

// arrayOf decodes the array of members that is the stream's next value,
// one member at a time, into a new E for each, handing each to f; more
// than MaxMembers is errTooManyMembers. where names the i-th member in an
// error of its own (a bound its tags exceed); a syntax or type error is
// placed at its line.
func arrayOf[E any](s *jsonStream, where func(i int) string, f func(i int, m *E) error) error {
	t, err := s.token()
	if err != nil {
		return err
	}
	if t == nil {
		return nil
	}
	if d, ok := t.(json.Delim); !ok || d != '[' {
		return fmt.Errorf(" members: want an array, got %s", jsonWord(t))
	}
	for i := 0; s.dec.More(); i++ {
		if i == MaxMembers {
			return fmt.Errorf(" %w", errTooManyMembers)
		}
		var m E
		if err := s.decode(&m); err != nil {
			var at *atLine
			if errors.As(err, &at) {
				return err
			}
			return fmt.Errorf("%s:%w", where(i), err)
		}
		if err := f(i, &m); err != nil {
			return err
		}
		// No error of a later member is placed before this one ends.
		s.lines.forget(s.dec.InputOffset())
	}
	_, err = s.token() // ]
	return err
}

// placed places a decoding error of a value that started at start in the
// input, at its line.
func (s *jsonStream) placed(err error, start int64) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF), err == io.EOF:
		return lineError(s.lines.lastLine(), "unexpected end of JSON input")
	case errors.As(err, &syn):
		return lineError(s.lines.lineAt(start+syn.Offset), "%v", syn)
	case errors.As(err, &typ):
		return lineError(s.lines.lineAt(start+typ.Offset), "%v", typ)
	}
	return fmt.Errorf(" %w", err)
}

// lineCounter counts the lines of what is read through it, to place
// offsets in the input. It keeps the offsets of the newlines read since
// the last forget, not of all: a list of 60 MB, one line a field, has
// millions.
type lineCounter struct {
	r        io.Reader
	n        int64   // bytes read
	newlines []int64 // offsets of the newlines read since the last forget
	before   int     // newlines before newlines[0]
	// limit, when set, bounds the bytes read past mark, where the value
	// being decoded starts.
	limit, mark int64
}

// errValueTooLarge is a member, or a field, longer than maxValue.
var errValueTooLarge = fmt.Errorf("more than %d MiB of text, which no member holds", maxValue>>20)

func (c *lineCounter) Read(p []byte) (int, error) {
	if c.limit > 0 {
		room := c.mark + c.limit - c.n
		if room <= 0 {
			return 0, errValueTooLarge
		}
		if int64(len(p)) > room {
			p = p[:room]
		}
	}
	n, err := c.r.Read(p)
	for i := 0; i < n; {
		j := bytes.IndexByte(p[i:n], '\n')
		if j < 0 {
			break
		}
		c.newlines = append(c.newlines, c.n+int64(i+j))
		i += j + 1
	}
	c.n += int64(n)
	return n, err
}

// lineAt returns the line of the byte at off, which is not before the last
// offset forgotten.
func (c *lineCounter) lineAt(off int64) int {
	return 1 + c.before + sort.Search(len(c.newlines), func(i int) bool { return c.newlines[i] >= off })
}

// lastLine is the line of the last byte read.
func (c *lineCounter) lastLine() int { return c.lineAt(max(c.n-1, 0)) }

// forget drops what it takes to place offsets before off.
func (c *lineCounter) forget(off int64) {
	i := sort.Search(len(c.newlines), func(i int) bool { return c.newlines[i] >= off })
	c.before += i
	c.newlines = c.newlines[i:]
}
