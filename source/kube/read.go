package kube

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"sort"
	"strings"

	"golang.org/x/text/encoding/unicode"
	"golang.org/x/text/transform"
	apiyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// fileReader reads one input.
type fileReader struct {
	name string
	objs *Objects
	line int // the line being read, for I/O errors
}

// maxListDepth bounds lists within lists.
const maxListDepth = 8

// lineError is an error at a line of the input.
type lineError struct {
	line int
	err  error
}

func (e *lineError) Error() string { return fmt.Sprintf("%d: %v", e.line, e.err) }
func (e *lineError) Unwrap() error { return e.err }

func errAt(line int, format string, args ...any) error {
	return &lineError{line: line, err: fmt.Errorf(format, args...)}
}

// errorLine returns the line an error names, or 0.
func errorLine(err error) int {
	var le *lineError
	if errors.As(err, &le) {
		return le.line
	}
	return 0
}

// read reads the whole input: JSON when it starts with { or [, else YAML.
func (rd *fileReader) read(r io.Reader) error {
	br := bufio.NewReaderSize(r, 64<<10)
	// Byte-order marks: UTF-8 is skipped, UTF-16 (what PowerShell's > writes)
	// is converted.
	if b, _ := br.Peek(3); bytes.HasPrefix(b, []byte{0xEF, 0xBB, 0xBF}) {
		br.Discard(3)
	} else if bytes.HasPrefix(b, []byte{0xFF, 0xFE}) || bytes.HasPrefix(b, []byte{0xFE, 0xFF}) {
		utf16 := unicode.UTF16(unicode.BigEndian, unicode.ExpectBOM).NewDecoder()
		br = bufio.NewReaderSize(transform.NewReader(br, utf16), 64<<10)
	}
	first, err := firstNonSpace(br)
	if err != nil {
		return err
	}
	if first != '{' && first != '[' {
		return rd.readYAML(br)
	}
	// The stream reader keeps what JSON read until the first object is
	// through, to read it again as YAML: a YAML flow mapping starts with {
	// too. If neither reads, the error of the one that got further is
	// reported, JSON's on a tie.
	sr := apiyaml.NewStreamReader(br, 64<<10)
	jerr, again := rd.readJSON(sr)
	if !again {
		return jerr
	}
	sr.Rewind()
	cp := rd.objs.checkpoint()
	yerr := rd.readYAML(bufio.NewReader(sr))
	if yerr == nil {
		return nil
	}
	rd.objs.rollback(cp)
	if errorLine(yerr) > errorLine(jerr) {
		return yerr
	}
	return jerr
}

// firstNonSpace returns the first byte that is not white space, without
// consuming it; 0 at the end of the input.
func firstNonSpace(br *bufio.Reader) (byte, error) {
	for n := 1; ; n++ {
		b, err := br.Peek(n)
		if len(b) == n {
			switch c := b[n-1]; c {
			case ' ', '\t', '\r', '\n':
				if n < br.Size() {
					continue
				}
				return 0, nil
			default:
				return c, nil
			}
		}
		if err == io.EOF {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
	}
}

// object is one object as JSON, placed in the input. JSON read from the
// input keeps its newlines, which place each field; JSON converted from YAML
// has none, which places all of it at line.
type object struct {
	raw  []byte
	line int  // where the object starts
	yaml bool // converted from YAML
}

// lineAt returns the line of raw[off].
func (o object) lineAt(off int64) int {
	return o.line + bytes.Count(o.raw[:min(max(off, 0), int64(len(o.raw)))], []byte{'\n'})
}

// lastLine returns the line of the last byte of raw that is not white space.
func (o object) lastLine() int {
	return o.lineAt(int64(len(bytes.TrimRight(o.raw, " \t\r\n")) - 1))
}

// header is what every object says about itself.
type header struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

func readHeader(o object) (*header, error) {
	var h header
	if err := json.Unmarshal(o.raw, &h); err != nil {
		return nil, decodeError(o, "", err)
	}
	return &h, nil
}

// isList reports whether kind is a list: List, PodList, ...
func isList(kind string) bool { return strings.HasSuffix(kind, "List") }

// itemDefaults returns the apiVersion and kind that the items of a list
// leaving them out have: none for List, Pod in v1 for a v1 PodList.
func itemDefaults(h *header) header {
	kind := strings.TrimSuffix(h.Kind, "List")
	if kind == "" {
		return header{}
	}
	return header{APIVersion: h.APIVersion, Kind: kind}
}

// value reads one object held in memory: a list, whose items it reads in
// turn, a kept kind, or an ignored one. def gives the apiVersion and kind of
// objects that name no kind: the items of a typed list.
func (rd *fileReader) value(o object, def header, depth int) error {
	if len(o.raw) == 0 || o.raw[0] != '{' {
		return errAt(o.line, "not a Kubernetes object: a JSON %s", jsonKindOf(o.raw))
	}
	h, err := readHeader(o)
	if err != nil {
		return err
	}
	return rd.valueOf(o, h, def, depth)
}

// valueOf is value for an object whose header has been read.
func (rd *fileReader) valueOf(o object, h *header, def header, depth int) error {
	if !isList(h.Kind) {
		return rd.add(o, h, def)
	}
	jr := &jsonReader{rd: rd, dec: json.NewDecoder(bytes.NewReader(o.raw)), pos: o, yaml: o.yaml}
	return jr.object(def, depth, &o)
}

// add checks an object that is not a list and adds it to the objects.
func (rd *fileReader) add(o object, h *header, def header) error {
	if h.Kind == "" {
		if def.Kind == "" {
			return errAt(o.line, "object has no kind")
		}
		h.Kind = def.Kind
	}
	if h.APIVersion == "" && h.Kind == def.Kind {
		h.APIVersion = def.APIVersion
	}
	if h.APIVersion == "" {
		return errAt(o.line, "%s has no apiVersion", h.Kind)
	}
	return rd.objs.add(rd.name, o, h)
}

// position places offsets of a JSON text in the input.
type position interface {
	lineAt(off int64) int
	lastLine() int
}

// jsonReader reads JSON objects field by field, so that the items of a list
// are read, and added, one at a time: memory follows the largest item
// rather than the list.
type jsonReader struct {
	rd  *fileReader
	dec *json.Decoder
	pos position
	// yaml is set for JSON converted from YAML.
	yaml bool
	// read, when set, is called once an item or a top-level value has been
	// read, with the offset where it started.
	read func(start int64)
	// syntax is set once the input turned out not to be JSON.
	syntax bool
}

// field is one field of an object other than a list's items.
type field struct {
	key  string
	raw  json.RawMessage
	line int // where the value starts
}

// object reads the object at the decoder's position. whole is the object
// when it is held in memory already; otherwise it is put together again from
// its fields, the items left out, on the lines they came from.
func (jr *jsonReader) object(def header, depth int, whole *object) error {
	dec := jr.dec
	t, err := dec.Token()
	if err != nil {
		return jr.syntaxError(err)
	}
	line := jr.pos.lineAt(dec.InputOffset() - 1)
	if d, ok := t.(json.Delim); !ok || d != '{' {
		return errAt(line, "not a Kubernetes object: a JSON %s", jsonTokenKind(t))
	}
	var (
		fields    []field
		items     []object // items read before the list's kind
		list      *header  // the list's kind, when it comes before its items
		cp        *checkpoint
		itemsLine int
		notList   bool // items is not a list
	)
	seen := false
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return jr.syntaxError(err)
		}
		key, _ := t.(string)
		if key != "items" || seen {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return jr.syntaxError(err)
			}
			fields = append(fields, field{key, raw, jr.pos.lineAt(dec.InputOffset() - int64(len(raw)))})
			continue
		}
		seen = true
		if t, err = dec.Token(); err != nil {
			return jr.syntaxError(err)
		}
		itemsLine = jr.pos.lineAt(dec.InputOffset() - 1)
		if d, ok := t.(json.Delim); !ok || d != '[' {
			// null reads as no items; anything else is an error if the
			// object turns out to be a list.
			notList = t != nil
			if err := jr.skip(t); err != nil {
				return err
			}
			continue
		}
		if depth >= maxListDepth {
			return errAt(line, "lists nested more than %d deep", maxListDepth)
		}
		if h, err := readHeader(jr.fieldsObject(line, fields)); err == nil && h.Kind != "" {
			list = h
		}
		for dec.More() {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return jr.syntaxError(err)
			}
			start := dec.InputOffset() - int64(len(raw))
			it := object{raw: raw, line: jr.pos.lineAt(start), yaml: jr.yaml}
			if jr.read != nil {
				jr.read(start)
			}
			switch {
			case list != nil && !isList(list.Kind):
				// The items of an object that is not a list are not objects.
			case list != nil:
				err = jr.rd.value(it, itemDefaults(list), depth+1)
			default:
				// The list's kind comes after its items (kubectl's
				// order): items that name their kind are read now, and
				// forgotten if the object is no list after all.
				h, herr := readHeader(it)
				if herr != nil || h.Kind == "" || h.APIVersion == "" {
					items = append(items, it)
					break
				}
				if cp == nil {
					c := jr.rd.objs.checkpoint()
					cp = &c
				}
				err = jr.rd.valueOf(it, h, header{}, depth+1)
			}
			if err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil { // ]
			return jr.syntaxError(err)
		}
	}
	if _, err := dec.Token(); err != nil { // }
		return jr.syntaxError(err)
	}

	var o object
	if whole != nil {
		o = *whole
	} else {
		o = jr.fieldsObject(line, fields)
	}
	h, err := readHeader(o)
	if err != nil {
		return err
	}
	if !isList(h.Kind) {
		if cp != nil {
			jr.rd.objs.rollback(*cp)
		}
		return jr.rd.add(o, h, def)
	}
	if notList {
		return errAt(itemsLine, "items is not a list")
	}
	for _, f := range fields {
		if f.key == "items" {
			return errAt(f.line, "items appears twice")
		}
	}
	for _, it := range items {
		if err := jr.rd.value(it, itemDefaults(h), depth+1); err != nil {
			return err
		}
	}
	return nil
}

// fieldsObject puts an object together from its fields, each value on the
// line it came from, so that lines can be told from offsets as in the input.
func (jr *jsonReader) fieldsObject(line int, fields []field) object {
	buf := []byte{'{'}
	at := line
	for i, f := range fields {
		if i > 0 {
			buf = append(buf, ',')
		}
		for ; at < f.line; at++ {
			buf = append(buf, '\n')
		}
		key, _ := json.Marshal(f.key)
		buf = append(append(append(buf, key...), ':'), f.raw...)
		at += bytes.Count(f.raw, []byte{'\n'})
	}
	return object{raw: append(buf, '}'), line: line, yaml: jr.yaml}
}

// skip reads past the rest of the value that starts with token t.
func (jr *jsonReader) skip(t json.Token) error {
	for depth := 0; ; {
		if d, ok := t.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
			} else {
				depth--
			}
		}
		if depth == 0 {
			return nil
		}
		var err error
		if t, err = jr.dec.Token(); err != nil {
			return jr.syntaxError(err)
		}
	}
}

// syntaxError places an error of the decoder in the input.
func (jr *jsonReader) syntaxError(err error) error {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		jr.syntax = true
		// The decoder counts the offsets of errors within a value from
		// where it started reading values, not from the start of the
		// input; a value that fails is still buffered, so reading it
		// again alone finds where.
		off := se.Offset
		var again *json.SyntaxError
		if errors.As(json.NewDecoder(jr.dec.Buffered()).Decode(new(json.RawMessage)), &again) && again.Error() == se.Error() {
			off = jr.dec.InputOffset() + again.Offset - 1
		}
		return errAt(jr.pos.lineAt(off), "%w", se)
	case errors.Is(err, io.ErrUnexpectedEOF):
		jr.syntax = true
		return errAt(jr.pos.lastLine(), "unexpected end of JSON input")
	case err == io.EOF:
		return err // the end of a stream of values
	}
	return errAt(jr.pos.lastLine(), "%w", err)
}

// readJSON reads a stream of JSON values. again reports a syntax error
// before the first object was read: the input may be YAML.
func (rd *fileReader) readJSON(sr *apiyaml.StreamReader) (err error, again bool) {
	lines := &lineCounter{r: sr}
	first := true
	jr := &jsonReader{rd: rd, dec: json.NewDecoder(lines), pos: lines}
	jr.read = func(start int64) {
		// What was read so far reads as JSON: the stream reader need not
		// keep it, nor the line counter place it.
		first = false
		sr.Consume(math.MaxInt)
		lines.forget(start)
	}
	for {
		err := jr.object(header{}, 0, nil)
		if err == io.EOF {
			return nil, false
		}
		if err != nil {
			return err, first && jr.syntax
		}
		jr.read(jr.dec.InputOffset())
	}
}

// lineCounter counts the lines of what is read through it, to place
// offsets in the input.
type lineCounter struct {
	r        io.Reader
	n        int64   // bytes read
	newlines []int64 // offsets of the newlines read since the last forget
	before   int     // newlines before newlines[0]
	last     int     // line of the last byte that is not white space
}

func (c *lineCounter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	for i := 0; i < n; {
		j := bytes.IndexByte(p[i:n], '\n')
		if j < 0 {
			break
		}
		c.newlines = append(c.newlines, c.n+int64(i+j))
		i += j + 1
	}
	if i := len(bytes.TrimRight(p[:n], " \t\r\n")) - 1; i >= 0 {
		c.last = c.lineAt(c.n + int64(i))
	}
	c.n += int64(n)
	return n, err
}

// lineAt returns the line of the byte at off, which is not before the last
// offset forgotten.
func (c *lineCounter) lineAt(off int64) int {
	return 1 + c.before + sort.Search(len(c.newlines), func(i int) bool { return c.newlines[i] >= off })
}

func (c *lineCounter) lastLine() int { return max(c.last, 1) }

// forget drops what it takes to place offsets before off.
func (c *lineCounter) forget(off int64) {
	i := sort.Search(len(c.newlines), func(i int) bool { return c.newlines[i] >= off })
	c.before += i
	c.newlines = c.newlines[i:]
}

// decodeError places an error from decoding o in the input and says which
// field was wrong.
func decodeError(o object, what string, err error) error {
	if what != "" {
		what += ": "
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			field = "the object"
		}
		// A string given unquoted may read as a boolean or a number.
		var hint string
		if te.Type != nil && te.Type.Kind() == reflect.String && (te.Value == "bool" || te.Value == "number") {
			hint = ": quote it"
			if te.Value == "bool" && o.yaml {
				hint += ", as YAML reads y, n, yes, no, on and off unquoted as booleans"
			}
		}
		return errAt(o.lineAt(te.Offset-1), "%s%s: expected %s, found %s%s", what, field, jsonTypeName(te.Type), te.Value, hint)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return errAt(o.lineAt(se.Offset-1), "%s%w", what, se)
	}
	return errAt(o.line, "%s%s", what, strings.TrimPrefix(err.Error(), "json: "))
}

// jsonKindOf names the kind of JSON value raw is.
func jsonKindOf(raw []byte) string {
	t, _ := json.NewDecoder(bytes.NewReader(raw)).Token()
	return jsonTokenKind(t)
}

// jsonTokenKind names the kind of JSON value that starts with token t.
func jsonTokenKind(t json.Token) string {
	switch t := t.(type) {
	case json.Delim:
		if t == '[' {
			return "array"
		}
		return "object"
	case string:
		return "string"
	case bool:
		return "boolean"
	case nil:
		return "null"
	}
	return "number"
}

// jsonTypeName names a Go type as the JSON it is read from.
func jsonTypeName(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return fmt.Sprintf("an integer (%s)", t.Kind())
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a base64 string"
		}
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return t.String()
}
