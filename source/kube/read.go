package kube

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"unicode/utf16"
)

// fileReader reads one input.
type fileReader struct {
	name string
	objs *Objects
	line int // the line being read, for I/O errors
}

// maxListDepth bounds lists within lists.
const maxListDepth = 8

// object is one JSON object and the means to place its bytes in the input.
type object struct {
	raw    []byte
	lineAt func(off int) int // line of raw[off]
}

func (o object) line() int { return o.lineAt(0) }

// sub returns the part of o from start to end, placed in the input.
func (o object) sub(start, end int) object {
	parent := o.lineAt
	return object{raw: o.raw[start:end], lineAt: func(off int) int { return parent(start + off) }}
}

// read reads the whole input: JSON when it starts with { or [ (read into
// memory at once), else YAML (read one document at a time).
func (rd *fileReader) read(r io.Reader) error {
	br := bufio.NewReaderSize(r, 64<<10)
	// Byte-order marks: UTF-8 is skipped, UTF-16 (what PowerShell's > writes)
	// is converted.
	if b, _ := br.Peek(3); bytes.HasPrefix(b, []byte{0xEF, 0xBB, 0xBF}) {
		br.Discard(3)
	} else if bytes.HasPrefix(b, []byte{0xFF, 0xFE}) || bytes.HasPrefix(b, []byte{0xFE, 0xFF}) {
		data, err := io.ReadAll(br)
		if err != nil {
			return err
		}
		br = bufio.NewReader(bytes.NewReader(fromUTF16(data)))
	}
	first, err := firstNonSpace(br)
	if err != nil {
		return err
	}
	if first == '{' || first == '[' {
		data, err := io.ReadAll(br)
		if err != nil {
			return err
		}
		atFirst, jerr := rd.readJSON(data)
		if jerr == nil || !atFirst {
			return jerr
		}
		// A YAML flow mapping also starts with {: if the text reads as
		// YAML, it is YAML; if neither reads, report the error of the
		// one that got further, JSON's on a tie.
		cp := rd.objs.checkpoint()
		yerr := rd.readYAML(bufio.NewReader(bytes.NewReader(data)))
		if yerr == nil {
			return nil
		}
		rd.objs.rollback(cp)
		if errorLine(yerr) > errorLine(jerr) {
			return yerr
		}
		return jerr
	}
	return rd.readYAML(br)
}

// errorLine returns the line an error names, or 0.
func errorLine(err error) int {
	var le *lineError
	if errors.As(err, &le) {
		return le.line
	}
	return 0
}

func fromUTF16(b []byte) []byte {
	big := b[0] == 0xFE
	b = b[2:]
	u := make([]uint16, 0, len(b)/2)
	for i := 0; i+1 < len(b); i += 2 {
		if big {
			u = append(u, uint16(b[i])<<8|uint16(b[i+1]))
		} else {
			u = append(u, uint16(b[i+1])<<8|uint16(b[i]))
		}
	}
	return []byte(string(utf16.Decode(u)))
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

// readJSON reads a stream of JSON values. atFirst reports a syntax error in
// the first value, before anything was read.
func (rd *fileReader) readJSON(data []byte) (atFirst bool, err error) {
	lines := &lineCounter{data: data}
	dec := json.NewDecoder(bytes.NewReader(data))
	for first := true; ; first = false {
		start := skipSpace(data, int(dec.InputOffset()))
		rd.line = lines.at(start)
		var m json.RawMessage
		err := dec.Decode(&m)
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			var se *json.SyntaxError
			if errors.As(err, &se) {
				return first, errAt(lines.at(int(se.Offset)-1), "%v", se)
			}
			if errors.Is(err, io.ErrUnexpectedEOF) {
				last := len(bytes.TrimRight(data, " \t\r\n"))
				return first, errAt(lines.at(max(last-1, 0)), "unexpected end of JSON input")
			}
			return first, errAt(lines.at(start), "%v", err)
		}
		end := int(dec.InputOffset())
		obj := object{raw: data[start:end], lineAt: func(off int) int { return lines.at(start + off) }}
		if err := rd.value(obj, "", "", 0); err != nil {
			return false, err
		}
	}
}

// skipSpace returns where the value after offset i starts: past white
// space and the separators before a value.
func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\r', '\n', ',', ':':
			i++
		default:
			return i
		}
	}
	return i
}

// lineCounter maps offsets to lines, fast when they are asked in order.
type lineCounter struct {
	data []byte
	off  int // newlines before off have been counted
	line int // line of data[off], less one
}

func (l *lineCounter) at(off int) int {
	off = min(max(off, 0), len(l.data))
	if off < l.off {
		l.off, l.line = 0, 0
	}
	l.line += bytes.Count(l.data[l.off:off], []byte{'\n'})
	l.off = off
	return l.line + 1
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

// value reads one JSON object: a list, a kept kind, or an ignored one.
// defAPIVersion and defKind apply to objects that name no kind: the items of
// a typed list.
func (rd *fileReader) value(o object, defAPIVersion, defKind string, depth int) error {
	h, err := readHeader(o, defAPIVersion, defKind)
	if err != nil {
		return err
	}
	if isList(h.Kind) {
		if depth >= maxListDepth {
			return errAt(o.line(), "lists nested more than %d deep", maxListDepth)
		}
		items, err := listItems(o)
		if err != nil {
			return err
		}
		apiVersion, kind := itemDefaults(h)
		for _, it := range items {
			if err := rd.value(it, apiVersion, kind, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	if h.APIVersion == "" {
		return errAt(o.line(), "%s has no apiVersion", h.Kind)
	}
	return rd.objs.add(rd.name, o, h)
}

// readHeader reads what an object says about itself, defaulting the kind
// and apiVersion of the items of a typed list.
func readHeader(o object, defAPIVersion, defKind string) (*header, error) {
	if len(o.raw) == 0 || o.raw[0] != '{' {
		return nil, errAt(o.line(), "not a Kubernetes object: a JSON %s", jsonKindOf(o.raw))
	}
	var h header
	if err := json.Unmarshal(o.raw, &h); err != nil {
		return nil, decodeError(o, "", err)
	}
	if h.Kind == "" {
		if defKind == "" {
			return nil, errAt(o.line(), "object has no kind")
		}
		h.Kind = defKind
	}
	if h.APIVersion == "" && h.Kind == defKind {
		h.APIVersion = defAPIVersion
	}
	return &h, nil
}

// isList reports whether kind is a list: List, PodList, ...
func isList(kind string) bool { return strings.HasSuffix(kind, "List") }

// itemDefaults returns the apiVersion and kind of the items of a list that
// leave them out: none for List, Pod in v1 for a v1 PodList.
func itemDefaults(h *header) (apiVersion, kind string) {
	kind = strings.TrimSuffix(h.Kind, "List")
	if kind == "" {
		return "", ""
	}
	return h.APIVersion, kind
}

func jsonKindOf(raw []byte) string {
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '[':
		return "array"
	case '"':
		return "string"
	case 'n':
		return "null"
	case 't', 'f':
		return "boolean"
	}
	return "number"
}

// listItems returns the items of a list object, each placed in the input.
func listItems(o object) ([]object, error) {
	dec := json.NewDecoder(bytes.NewReader(o.raw))
	if _, err := dec.Token(); err != nil { // {
		return nil, errAt(o.line(), "%v", err)
	}
	var items []object
	seen := false
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, errAt(o.line(), "%v", err)
		}
		key, _ := t.(string)
		if key != "items" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, errAt(o.line(), "%v", err)
			}
			continue
		}
		at := skipSpace(o.raw, int(dec.InputOffset()))
		if seen {
			return nil, errAt(o.lineAt(at), "items appears twice")
		}
		seen = true
		t, err = dec.Token()
		if err != nil {
			return nil, errAt(o.lineAt(at), "%v", err)
		}
		if t == nil {
			continue // items: null
		}
		if d, ok := t.(json.Delim); !ok || d != '[' {
			return nil, errAt(o.lineAt(at), "items is not a list")
		}
		for dec.More() {
			start := skipSpace(o.raw, int(dec.InputOffset()))
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, errAt(o.lineAt(start), "%v", err)
			}
			items = append(items, o.sub(start, int(dec.InputOffset())))
		}
		if _, err := dec.Token(); err != nil { // ]
			return nil, errAt(o.lineAt(at), "%v", err)
		}
	}
	return items, nil
}

// decodeError places an error from decoding o in the input and says which
// field was wrong.
func decodeError(o object, what string, err error) error {
	if what != "" {
		what += ": "
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		line := o.line()
		if te.Offset > 0 && int(te.Offset) <= len(o.raw) {
			line = o.lineAt(int(te.Offset) - 1)
		}
		field := te.Field
		if field == "" {
			field = "the object"
		}
		return errAt(line, "%s%s: expected %s, found %s", what, field, jsonTypeName(te.Type), te.Value)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return errAt(o.lineAt(max(int(se.Offset)-1, 0)), "%s%v", what, se)
	}
	return errAt(o.line(), "%s%v", what, strings.TrimPrefix(err.Error(), "json: "))
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
