package kubectl

import (
	"bufio"
	"bytes"
	"io"

	"golang.org/x/text/encoding/unicode"
	"golang.org/x/text/transform"
	apiyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// reader reads one input.
type reader struct {
	name string
	objs *Objects
	// at, once set, returns the line being read, for I/O errors.
	at func() int
}

func (rd *reader) line() int {
	if rd.at == nil {
		return 1
	}
	return rd.at()
}

// maxListDepth bounds lists within lists.
const maxListDepth = 8

// read reads the whole input: JSON when it starts with { or [, else YAML.
func (rd *reader) read(r io.Reader) error {
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
	yerr := rd.readYAML(sr)
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

// value reads one object held in memory: a list, whose items it reads in
// turn, a kept kind, or an ignored one. def gives the apiVersion and kind of
// objects that name no kind: the items of a typed list.
func (rd *reader) value(o object, def header, depth int) error {
	if len(o.raw) == 0 || o.raw[0] != '{' {
		return errAt(o.line, "not a Kubernetes object: a JSON %s", jsonKindOf(o.raw))
	}
	h, err := readHeader(o)
	if err != nil {
		return err
	}
	return rd.valueOf(o, h, def, depth, nil)
}

// valueOf is value for an object whose header has been read. place, when
// set, places the items of a list, by their index.
func (rd *reader) valueOf(o object, h *header, def header, depth int, place func(int) int) error {
	if !isList(h.Kind) {
		return rd.add(o, h, def)
	}
	jr := &jsonReader{rd: rd, dec: newDecoder(o.raw), pos: o, yaml: o.yaml, place: place}
	return jr.object(def, depth, &o, h)
}

// add checks an object that is not a list and adds it to the objects.
func (rd *reader) add(o object, h *header, def header) error {
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
