package kube

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// maxWhole bounds the text of a YAML list that is kept to read it whole
// when it cannot be read item by item (see yamlDoc). A larger list must be
// laid out as kubectl prints it, each item reading on its own.
var maxWhole = 32 << 20

// readYAML reads a stream of YAML documents, separated by lines that start
// with --- (or ended by lines that start with ...), counting lines so as to
// place each document in the input.
func (rd *fileReader) readYAML(br *bufio.Reader) error {
	d := &yamlDoc{rd: rd, start: 1}
	var long []byte
	for rd.line = 1; ; rd.line++ {
		l, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			long = append(long[:0], l...)
			for err == bufio.ErrBufferFull {
				l, err = br.ReadSlice('\n')
				long = append(long, l...)
			}
			l = long
		}
		if len(l) > 0 {
			if isMarker(l, "---") && !d.onlyDirectives() {
				// The start marker belongs to the document it starts, as
				// do the directives before it.
				if err := d.end(); err != nil {
					return err
				}
				d = &yamlDoc{rd: rd, start: rd.line}
			}
			if err := d.add(l, rd.line); err != nil {
				return err
			}
			if isMarker(l, "...") {
				if err := d.end(); err != nil {
					return err
				}
				d = &yamlDoc{rd: rd, start: rd.line + 1}
			}
		}
		if err == io.EOF {
			return d.end()
		}
		if err != nil {
			return err
		}
	}
}

func isMarker(l []byte, m string) bool {
	rest, ok := bytes.CutPrefix(l, []byte(m))
	return ok && (len(rest) == 0 || rest[0] == ' ' || rest[0] == '\t' || rest[0] == '\r' || rest[0] == '\n')
}

// yamlDoc is one YAML document, read line by line. A list laid out as
// kubectl prints it (a root mapping whose items: key holds a block
// sequence, one item per "- " line at the sequence's indentation and the
// lines indented further) is read item by item as the items come, each
// converted to JSON on its own, so that memory follows the largest item
// rather than the list. A list laid out otherwise, or whose items do not
// read on their own (an alias to an anchor in another item), is read whole,
// from its text, which is kept up to maxWhole for that; other documents are
// read whole.
type yamlDoc struct {
	rd    *fileReader
	start int // line of the input where text starts
	first int // line where the document's content starts, 0 before it

	text       []byte // the whole text, nil once dropped
	dropped    bool   // text was over maxWhole
	whole      bool   // read the text whole at the end
	directives bool   // a %directive came before any content
	marker     bool   // a --- line came before any content

	// Reading item by item:
	split     bool   // the root items: key was seen
	inItems   bool   // its lines are being read
	indent    int    // of the items' dashes, -1 before the first
	head      []byte // the text without the items
	headLines int    // lines of head before the first item
	itemLines int    // lines taken by items
	item      []byte // text of the item being read
	itemOpen  bool
	itemLine  int         // where it starts
	list      *header     // the list's kind, once known
	deferred  []object    // items that name no kind, read once the list's is known
	cp        *checkpoint // what the objects were before the items
}

func (d *yamlDoc) onlyDirectives() bool { return d.directives && !d.marker && d.first == 0 }

// add reads line l, line n of the input.
func (d *yamlDoc) add(l []byte, n int) error {
	content := bytes.TrimRight(l, " \t\r\n")
	ind := len(content) - len(bytes.TrimLeft(content, " "))
	blank := ind == len(content) || content[ind] == '#'
	if d.first == 0 && !blank {
		rest, marker := bytes.CutPrefix(content, []byte("---"))
		rest = bytes.TrimLeft(rest, " \t")
		switch {
		case content[0] == '%':
			d.directives = true
		case marker && (len(rest) == 0 || rest[0] == '#'):
			d.marker = true
		default:
			d.first = n
		}
	}
	if !d.dropped {
		d.text = append(d.text, l...)
		if d.split && !d.whole && len(d.text) > maxWhole {
			d.text, d.dropped = nil, true
		}
	}
	if d.whole {
		return nil
	}
	if d.inItems {
		switch {
		case blank:
			if !d.itemOpen {
				d.head = append(d.head, l...)
			} else {
				d.item = append(d.item, l...)
				d.itemLines++
			}
			return nil
		case content[ind] == '\t':
			return d.notSplit(n, nil)
		case isDash(content[ind:]) && (d.indent < 0 || ind == d.indent):
			if err := d.endItem(); err != nil || d.whole {
				return err
			}
			if d.indent < 0 {
				d.headLines = bytes.Count(d.head, []byte{'\n'})
			}
			d.indent, d.itemLine, d.itemOpen = ind, n, true
			d.item = append(d.item[:0], l...)
			d.itemLines++
			return nil
		case d.itemOpen && ind > d.indent:
			d.item = append(d.item, l...)
			d.itemLines++
			return nil
		case ind == 0:
			if err := d.endItem(); err != nil || d.whole {
				return err
			}
			d.inItems = false // the next root key: read below
		default:
			return d.notSplit(n, nil)
		}
	}
	if ind == 0 && !blank && isItemsKey(content) {
		if d.split {
			return d.notSplit(n, errors.New("items appears twice"))
		}
		d.split, d.inItems, d.indent = true, true, -1
		cp := d.rd.objs.checkpoint()
		d.cp = &cp
		d.head = append(d.text[:len(d.text)-len(l):len(d.text)-len(l)], "items: []\n"...)
		// A list whose kind comes before its items (the API server's
		// order) reads its items as they come, with its defaults.
		if j, err := yaml.YAMLToJSON(d.head); err == nil {
			if h, err := readHeader(object{raw: j}); err == nil && h.Kind != "" {
				if !isList(h.Kind) {
					return d.notSplit(n, nil)
				}
				d.list = h
			}
		}
		return nil
	}
	if d.split {
		d.head = append(d.head, l...)
	}
	return nil
}

// isItemsKey reports whether a root line is "items:", perhaps with a
// comment.
func isItemsKey(content []byte) bool {
	rest, ok := bytes.CutPrefix(content, []byte("items:"))
	if !ok {
		return false
	}
	trimmed := bytes.TrimLeft(rest, " \t")
	return len(trimmed) == 0 || trimmed[0] == '#' && len(trimmed) < len(rest)
}

// isDash reports whether s starts a block sequence entry.
func isDash(s []byte) bool {
	return len(s) > 0 && s[0] == '-' && (len(s) == 1 || s[1] == ' ' || s[1] == '\t')
}

// notSplit turns to reading the document whole, forgetting what its items
// added, when the text was kept; else it fails with err, or at line n
// saying why the list cannot be read.
func (d *yamlDoc) notSplit(n int, err error) error {
	if d.dropped {
		if err == nil {
			err = errors.New("the items are not laid out as kubectl prints them")
		}
		var le *lineError
		if errors.As(err, &le) {
			n, err = le.line, le.err
		}
		return errAt(n, "%w; a list over %d MiB is read one item at a time, each on its own: save it again with kubectl get -o yaml", err, maxWhole>>20)
	}
	if d.cp != nil {
		d.rd.objs.rollback(*d.cp)
	}
	d.whole, d.deferred, d.item = true, nil, nil
	return nil
}

// endItem converts the item read so far and reads it.
func (d *yamlDoc) endItem() error {
	if !d.itemOpen {
		return nil
	}
	d.itemOpen = false
	j, err := yaml.YAMLToJSONStrict(d.item)
	if err != nil {
		return d.notSplit(d.itemLine, yamlError(err, d.item, d.itemLine, func(l int) int { return d.itemLine + l - 1 }))
	}
	var seq []json.RawMessage
	if err := json.Unmarshal(j, &seq); err != nil || len(seq) != 1 {
		return d.notSplit(d.itemLine, nil)
	}
	it := object{raw: seq[0], line: d.itemLine, yaml: true}
	if d.list != nil {
		return d.rd.value(it, itemDefaults(d.list), 1)
	}
	// The list's kind comes after its items (kubectl's order): items that
	// name their kind are read now, and forgotten if the document is no
	// list after all.
	h, err := readHeader(it)
	if err != nil || h.Kind == "" || h.APIVersion == "" {
		d.deferred = append(d.deferred, it)
		return nil
	}
	return d.rd.valueOf(it, h, header{}, 1)
}

// end reads what is left of the document.
func (d *yamlDoc) end() error {
	if d.first == 0 {
		return nil // only comments, directives and markers
	}
	if d.inItems {
		if err := d.endItem(); err != nil {
			return err
		}
	}
	if !d.split || d.whole {
		return d.readWhole()
	}
	// The head's lines are the document's, less the items'.
	headLine := func(l int) int {
		if l > d.headLines {
			l += d.itemLines
		}
		return d.start + l - 1
	}
	j, err := yaml.YAMLToJSONStrict(d.head)
	if err != nil {
		return d.notSplitAtEnd(yamlError(err, d.head, d.first, headLine))
	}
	o := object{raw: j, line: d.first, yaml: true}
	h, err := readHeader(o)
	if err != nil {
		return d.notSplitAtEnd(err)
	}
	if !isList(h.Kind) {
		return d.notSplitAtEnd(errAt(d.first, "%s has items but is not a list", h.Kind))
	}
	if err := d.rd.value(o, header{}, 0); err != nil {
		return err
	}
	for _, it := range d.deferred {
		if err := d.rd.value(it, itemDefaults(h), 1); err != nil {
			return err
		}
	}
	return nil
}

func (d *yamlDoc) notSplitAtEnd(err error) error {
	if err := d.notSplit(d.first, err); err != nil {
		return err
	}
	return d.readWhole()
}

// readWhole reads the document's text at once.
func (d *yamlDoc) readWhole() error {
	j, err := yaml.YAMLToJSONStrict(d.text)
	if err != nil {
		return yamlError(err, d.text, d.first, func(l int) int { return d.start + l - 1 })
	}
	o := object{raw: j, line: d.first, yaml: true}
	switch j[0] {
	case '{':
		return d.rd.value(o, header{}, 0)
	case 'n':
		return nil // "---" followed by nothing
	case '[':
		return errAt(d.first, "not a Kubernetes object: the document is a list")
	}
	return errAt(d.first, "not a Kubernetes object: the document is a scalar")
}

// yamlErrorText matches the line go-yaml names in its errors: "yaml: line
// 3: ...", or "yaml: unmarshal errors:\n  line 3: ..." for each of several.
var yamlErrorText = regexp.MustCompile(`^(?:yaml: )?(?:unmarshal errors:\n\s*)?line (\d+): ([^\n]*)`)

// yamlError places an error of the YAML decoder reading text in the input:
// lineOf maps the line it names to a line of the input; first stands for an
// error that names none. An error at the end of text may name the line after
// it: the last line stands for it.
func yamlError(err error, text []byte, first int, lineOf func(int) int) error {
	m := yamlErrorText.FindStringSubmatch(err.Error())
	if m == nil {
		return errAt(first, "%s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	n, _ := strconv.Atoi(m[1])
	last := bytes.Count(bytes.TrimSuffix(text, []byte{'\n'}), []byte{'\n'}) + 1
	return errAt(lineOf(min(max(n, 1), last)), "%s", m[2])
}
