package kubectl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"

	apiyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// The JSON reader below streams: it reads an object field by field and a
// list's items one at a time, so that reading what kubectl get pods -A -o
// json prints for a big cluster takes the memory of its largest item, plus
// what is kept. apimachinery's decoders (YAMLOrJSONDecoder, json.Decoder)
// hold a whole value, the List with every item, before handing it over:
// BenchmarkReadPodList measures both.

// position places offsets of a JSON text in the input.
type position interface {
	lineAt(off int64) int
	lastLine() int
}

func newDecoder(raw []byte) *json.Decoder { return json.NewDecoder(bytes.NewReader(raw)) }

// jsonReader reads JSON objects field by field, so that the items of a list
// are read, and added, one at a time: memory follows the largest item
// rather than the list.
type jsonReader struct {
	rd  *reader
	dec *json.Decoder
	pos position
	// yaml is set for JSON converted from YAML.
	yaml bool
	// place, when set, returns the line of a list's item by its index, for
	// JSON converted from YAML, whose items its text places.
	place func(int) int
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
// when it is held in memory already, and known its header when read; else
// the object is put together again from its fields, the items left out, on
// the lines they came from.
func (jr *jsonReader) object(def header, depth int, whole *object, known *header) error {
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
		items     []object    // items read before the list's kind
		list      = known     // the list's kind, when it comes before its items
		cp        *checkpoint // what the objects were before items read ahead of the list's kind
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
		if list == nil {
			if h, err := readHeader(jr.fieldsObject(line, fields)); err == nil && h.Kind != "" {
				list = h
			}
		}
		for i := 0; dec.More(); i++ {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return jr.syntaxError(err)
			}
			start := dec.InputOffset() - int64(len(raw))
			it := object{raw: raw, yaml: jr.yaml}
			if jr.place != nil {
				it.line = jr.place(i)
			} else {
				it.line = jr.pos.lineAt(start)
			}
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
				err = jr.rd.valueOf(it, h, header{}, depth+1, nil)
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

	h := known
	if h == nil {
		var o object
		if whole != nil {
			o = *whole
		} else {
			o = jr.fieldsObject(line, fields)
		}
		if h, err = readHeader(o); err != nil {
			return err
		}
		if !isList(h.Kind) {
			if cp != nil {
				jr.rd.objs.rollback(*cp)
			}
			return jr.rd.add(o, h, def)
		}
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
func (rd *reader) readJSON(sr *apiyaml.StreamReader) (err error, again bool) {
	lines := &lineCounter{r: sr}
	rd.at = lines.lastLine
	first := true
	jr := &jsonReader{rd: rd, dec: json.NewDecoder(lines), pos: lines}
	lines.limit = MaxObject
	jr.read = func(start int64) {
		// What was read so far reads as JSON: the stream reader need not
		// keep it, nor the line counter place it; the next object is
		// bounded from where this one ended.
		first = false
		sr.Consume(math.MaxInt)
		lines.forget(start)
		lines.mark = jr.dec.InputOffset()
	}
	for {
		err := jr.object(header{}, 0, nil, nil)
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
// offsets in the input, and bounds what is read past mark.
type lineCounter struct {
	r        io.Reader
	n        int64   // bytes read
	newlines []int64 // offsets of the newlines read since the last forget
	before   int     // newlines before newlines[0]
	last     int     // line of the last byte that is not white space
	// limit, when set, bounds the bytes read past mark, where the
	// object being read starts: the decoder holds a value whole before
	// it hands it over, so one object larger than any the API server
	// stores (an annotation of 300 MB, gzipped to a few hundred KB in a
	// bundle) is refused rather than held, and decoded, whole.
	limit, mark int64
}

// ErrObjectTooLarge is wrapped by the error for an object of the input
// larger than MaxObject.
var ErrObjectTooLarge = fmt.Errorf("an object larger than %d MiB, which no API server stores (etcd takes at most 1.5 MiB a request by default): not a saved object", MaxObject>>20)

// MaxObject bounds, in bytes, one object of a JSON input: an item of a
// list, or a value that is no list. The API server takes no request body
// larger than 3 MiB and stores none larger than etcd's request limit (1.5
// MiB by default; some clusters raise it to 10 MiB). Reading one object
// holds it about four times over (the decoder's buffer, what keeps it for
// a YAML reading, what decodes it).
const MaxObject = 16 << 20

func (c *lineCounter) Read(p []byte) (int, error) {
	if c.limit > 0 {
		room := c.mark + c.limit - c.n
		if room <= 0 {
			return 0, ErrObjectTooLarge
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
