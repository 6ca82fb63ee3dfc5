package kube

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"time"

	yaml "go.yaml.in/yaml/v3"
)

// lineError is an error at a line of the input.
type lineError struct {
	line int
	msg  string
}

func (e *lineError) Error() string { return strconv.Itoa(e.line) + ": " + e.msg }

func errAt(line int, format string, args ...any) error {
	return &lineError{line: line, msg: fmt.Sprintf(format, args...)}
}

// lineMap maps offsets in JSON text converted from YAML back to the YAML
// lines the values came from: off[i] is where a value starts, line[i] the
// line of the node that produced it. Offsets increase.
type lineMap struct {
	off  []int
	line []int
}

// at returns the line of the value that contains offset o: the last value
// that starts at or before o.
func (m *lineMap) at(o int) int {
	i := sort.SearchInts(m.off, o+1) - 1
	if i < 0 {
		if len(m.line) == 0 {
			return 0
		}
		return m.line[0]
	}
	return m.line[i]
}

// Limits that keep hostile input from exhausting the stack or memory.
const (
	maxDepth      = 1000
	maxAliasNodes = 100000
)

// yamlToJSON renders a YAML node as JSON and records where each value came
// from. Anchors and aliases are expanded (within a budget); merge keys and
// duplicate keys are errors, as are non-string keys and numbers JSON cannot
// hold.
type yamlToJSON struct {
	lineOf     func(int) int // maps node lines to lines of the input
	buf        []byte
	lines      lineMap
	aliasNodes int
}

func (c *yamlToJSON) node(n *yaml.Node, depth int, inAlias bool) error {
	if depth > maxDepth {
		return errAt(c.lineOf(n.Line), "nested more than %d levels deep", maxDepth)
	}
	if inAlias {
		c.aliasNodes++
		if c.aliasNodes > maxAliasNodes {
			return errAt(c.lineOf(n.Line), "aliases expand to more than %d nodes", maxAliasNodes)
		}
	}
	c.lines.off = append(c.lines.off, len(c.buf))
	c.lines.line = append(c.lines.line, c.lineOf(n.Line))
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) != 1 {
			return errAt(c.lineOf(n.Line), "empty document")
		}
		return c.node(n.Content[0], depth+1, inAlias)
	case yaml.AliasNode:
		if n.Alias == nil {
			return errAt(c.lineOf(n.Line), "unknown alias %q", n.Value)
		}
		return c.node(n.Alias, depth+1, true)
	case yaml.MappingNode:
		c.buf = append(c.buf, '{')
		seen := make(map[string]int, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			for k.Kind == yaml.AliasNode && k.Alias != nil {
				k = k.Alias
			}
			if k.Kind != yaml.ScalarNode {
				return errAt(c.lineOf(k.Line), "a mapping key must be a string")
			}
			if k.ShortTag() == "!!merge" {
				return errAt(c.lineOf(k.Line), "merge keys (<<) are not supported")
			}
			if first, dup := seen[k.Value]; dup {
				return errAt(c.lineOf(n.Content[i].Line), "key %q already appears at line %d", k.Value, first)
			}
			seen[k.Value] = c.lineOf(n.Content[i].Line)
			if i > 0 {
				c.buf = append(c.buf, ',')
			}
			c.buf = strconv.AppendQuote(c.buf, k.Value)
			c.buf = append(c.buf, ':')
			if err := c.node(v, depth+1, inAlias); err != nil {
				return err
			}
		}
		c.buf = append(c.buf, '}')
		return nil
	case yaml.SequenceNode:
		c.buf = append(c.buf, '[')
		for i, v := range n.Content {
			if i > 0 {
				c.buf = append(c.buf, ',')
			}
			if err := c.node(v, depth+1, inAlias); err != nil {
				return err
			}
		}
		c.buf = append(c.buf, ']')
		return nil
	case yaml.ScalarNode:
		return c.scalar(n)
	}
	return errAt(c.lineOf(n.Line), "unexpected YAML node")
}

func (c *yamlToJSON) scalar(n *yaml.Node) error {
	switch n.ShortTag() {
	case "!!str", "!!binary", "!!timestamp":
		// Timestamps stay text: the API types parse RFC 3339 themselves.
		// Binary stays base64, which is how JSON carries []byte.
		return c.str(n.Value)
	case "!!null":
		c.buf = append(c.buf, "null"...)
		return nil
	}
	var v any
	if err := n.Decode(&v); err != nil {
		return errAt(c.lineOf(n.Line), "%s", trimYAMLPrefix(err.Error()))
	}
	switch v := v.(type) {
	case nil:
		c.buf = append(c.buf, "null"...)
	case bool:
		c.buf = strconv.AppendBool(c.buf, v)
	case int:
		c.buf = strconv.AppendInt(c.buf, int64(v), 10)
	case int64:
		c.buf = strconv.AppendInt(c.buf, v, 10)
	case uint64:
		c.buf = strconv.AppendUint(c.buf, v, 10)
	case float64:
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return errAt(c.lineOf(n.Line), "%s is not a number JSON can hold", n.Value)
		}
		c.buf = strconv.AppendFloat(c.buf, v, 'g', -1, 64)
	case string:
		return c.str(v)
	case time.Time:
		return c.str(n.Value)
	default:
		return errAt(c.lineOf(n.Line), "unsupported YAML value %q (tag %s)", n.Value, n.ShortTag())
	}
	return nil
}

func (c *yamlToJSON) str(s string) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	c.buf = append(c.buf, b...)
	return nil
}

func trimYAMLPrefix(s string) string {
	const p = "yaml: "
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

// yamlErrorLine splits a go-yaml error into the line it names (0 when it
// names none) and the message without "yaml: line N: ". The line is a
// hint: go-yaml names the start of the construct it was parsing, counted
// from 0 for parser errors and from 1 for scanner errors.
func yamlErrorLine(err error) (int, string) {
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		err = errors.New(te.Errors[0])
	}
	s := trimYAMLPrefix(err.Error())
	const p = "line "
	if len(s) > len(p) && s[:len(p)] == p {
		rest := s[len(p):]
		i := 0
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
		if i > 0 && len(rest) > i+1 && rest[i] == ':' {
			if n, err := strconv.Atoi(rest[:i]); err == nil {
				msg := rest[i+1:]
				if len(msg) > 0 && msg[0] == ' ' {
					msg = msg[1:]
				}
				return n, msg
			}
		}
	}
	return 0, s
}

// yamlLines returns a function that maps go-yaml's line numbers in doc, a
// document that starts at line start of the input, to lines of the input.
// go-yaml also breaks lines at a lone CR, NEL, LS and PS; the input's lines
// (as editors and error messages count them) end only at LF.
func yamlLines(doc []byte, start int) func(int) int {
	var starts []int // starts[i] is the input line of go-yaml's line i+1
	special := false
	for pass := 0; pass < 2; pass++ {
		line := start
		starts = append(starts[:0], line)
		for i := 0; i < len(doc); {
			c := doc[i]
			switch {
			case c == '\r' && i+1 < len(doc) && doc[i+1] == '\n':
				i += 2
				line++
			case c == '\n':
				i++
				line++
			case c == '\r':
				i++
				special = true
			case c == 0xC2 && i+1 < len(doc) && doc[i+1] == 0x85:
				i += 2
				special = true
			case c == 0xE2 && i+2 < len(doc) && doc[i+1] == 0x80 && (doc[i+2] == 0xA8 || doc[i+2] == 0xA9):
				i += 3
				special = true
			default:
				i++
				continue
			}
			if pass == 1 {
				starts = append(starts, line)
			}
		}
		if !special {
			return func(l int) int { return start + max(l, 1) - 1 }
		}
	}
	return func(l int) int {
		return starts[min(max(l, 1), len(starts))-1]
	}
}

// readYAML reads a stream of YAML documents. It splits them itself, at
// lines that start with --- or ..., so that it knows the line each one
// starts at: go-yaml's messages do not name the first line of a document.
func (rd *fileReader) readYAML(br *bufio.Reader) error {
	var doc []byte
	docStart := 1
	rd.line = 0
	for {
		l, err := br.ReadBytes('\n')
		if len(l) > 0 {
			rd.line++
			if isMarker(l, "---") && !onlyDirectives(doc) {
				// The start marker belongs to the document it starts,
				// as do the directives before it.
				if err := rd.yamlDocument(doc, docStart); err != nil {
					return err
				}
				doc = doc[:0]
			}
			if len(doc) == 0 {
				docStart = rd.line
			}
			doc = append(doc, l...)
			if isMarker(l, "...") {
				if err := rd.yamlDocument(doc, docStart); err != nil {
					return err
				}
				doc = doc[:0]
			}
		}
		if err == io.EOF {
			return rd.yamlDocument(doc, docStart)
		}
		if err != nil {
			return err
		}
	}
}

// onlyDirectives reports whether doc holds nothing but directives (%YAML),
// comments and blank lines, which belong to the document a --- line starts.
func onlyDirectives(doc []byte) bool {
	hasDirective := false
	for _, l := range bytes.Split(doc, []byte{'\n'}) {
		l = bytes.TrimSpace(l)
		switch {
		case len(l) == 0 || l[0] == '#':
		case l[0] == '%':
			hasDirective = true
		default:
			return false
		}
	}
	return hasDirective
}

func isMarker(l []byte, m string) bool {
	if !bytes.HasPrefix(l, []byte(m)) {
		return false
	}
	rest := l[len(m):]
	return len(rest) == 0 || rest[0] == ' ' || rest[0] == '\t' || rest[0] == '\r' || rest[0] == '\n'
}

// yamlDocument reads one YAML document, whose first line is line start of
// the input. A list in kubectl's layout is read item by item, so that memory
// follows the largest item rather than the whole list.
func (rd *fileReader) yamlDocument(doc []byte, start int) error {
	if len(doc) == 0 {
		return nil
	}
	if rest, items, ok := splitItems(doc); ok && len(items) > 0 {
		if done, err := rd.yamlList(rest, items, start); done {
			return err
		}
	}
	return rd.yamlWhole(doc, start)
}

// yamlWhole reads one YAML document at once.
func (rd *fileReader) yamlWhole(doc []byte, start int) error {
	root, lineOf, err := parseYAML(doc, start)
	if err != nil || root == nil {
		return err
	}
	if root.Kind != yaml.MappingNode {
		return errAt(lineOf(root.Line), "not a Kubernetes object: the document is a %s", yamlKind(root))
	}
	c := &yamlToJSON{lineOf: lineOf}
	if err := c.node(root, 0, false); err != nil {
		return err
	}
	return rd.value(object{raw: c.buf, lineAt: c.lines.at}, "", "", 0)
}

// parseYAML parses one document whose first line is line start of the
// input, and returns its root node (nil when the document is empty) and the
// map from its node lines to input lines.
func parseYAML(doc []byte, start int) (*yaml.Node, func(int) int, error) {
	dec := yaml.NewDecoder(bytes.NewReader(doc))
	var n yaml.Node
	if err := dec.Decode(&n); err != nil {
		if err == io.EOF {
			return nil, nil, nil // only comments and blank lines
		}
		return nil, nil, yamlSyntaxError(err, doc, start)
	}
	lineOf := yamlLines(doc, start)
	var extra yaml.Node
	if err := dec.Decode(&extra); err != io.EOF {
		if err != nil {
			return nil, nil, yamlSyntaxError(err, doc, start)
		}
		return nil, nil, errAt(lineOf(extra.Line), "a second document without a --- line before it")
	}
	root := &n
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		return nil, nil, nil // "---" followed by nothing
	}
	return root, lineOf, nil
}

// yamlList reads a list document split by splitItems. It reports done false,
// having changed nothing, when the split turns out not to fit the document,
// which must then be read whole (and which may then be valid after all, or
// fail with the right message).
func (rd *fileReader) yamlList(rest []byte, items []chunk, start int) (done bool, err error) {
	root, lineOf, err := parseYAML(rest, start)
	if err != nil || root == nil || root.Kind != yaml.MappingNode {
		return false, nil
	}
	c := &yamlToJSON{lineOf: lineOf}
	if err := c.node(root, 0, false); err != nil {
		return false, nil
	}
	h, err := readHeader(object{raw: c.buf, lineAt: c.lines.at}, "", "")
	if err != nil || !isList(h.Kind) {
		return false, nil
	}
	apiVersion, kind := itemDefaults(h)
	cp := rd.objs.checkpoint()
	for _, it := range items {
		itemStart := start + it.line - 1
		root, lineOf, err := parseYAML(it.text, itemStart)
		if err != nil || root == nil || root.Kind != yaml.SequenceNode || len(root.Content) != 1 {
			rd.objs.rollback(cp)
			return false, nil
		}
		c := &yamlToJSON{lineOf: lineOf}
		if err := c.node(root.Content[0], 1, false); err != nil {
			rd.objs.rollback(cp)
			return false, nil
		}
		if err := rd.value(object{raw: c.buf, lineAt: c.lines.at}, apiVersion, kind, 1); err != nil {
			return true, err
		}
	}
	return true, nil
}

// chunk is the text of one list item; line is where it starts in the
// document, from 1.
type chunk struct {
	text []byte
	line int
}

// splitItems splits a document laid out as kubectl prints lists: a root
// mapping whose items: key holds a block sequence, one item per "- " line
// at the sequence's indentation and the lines indented further. It returns
// the document with items: [] in place of the sequence (and blank lines for
// the items', so lines keep their numbers) and the text of each item. ok is
// false when the document is not laid out that way.
func splitItems(doc []byte) (rest []byte, items []chunk, ok bool) {
	const (
		root = iota
		inItems
	)
	state, indent, lineNo, sawItems := root, -1, 0, false
	rest = make([]byte, 0, 4096)
	itemStart := -1 // offset of the current item, -1 when none
	closeItem := func(end int) {
		if itemStart >= 0 {
			items[len(items)-1].text = doc[itemStart:end]
			itemStart = -1
		}
	}
	for off := 0; off < len(doc); {
		end := bytes.IndexByte(doc[off:], '\n')
		if end < 0 {
			end = len(doc)
		} else {
			end += off + 1
		}
		line := doc[off:end]
		lineNo++
		content := bytes.TrimRight(line, " \t\r\n")
		ind := len(content) - len(bytes.TrimLeft(content, " "))
		blank := ind == len(content) || content[ind] == '#'
		if state == inItems {
			switch {
			case blank:
				if itemStart < 0 {
					rest = append(rest, line...)
				} else {
					rest = append(rest, '\n')
				}
				off = end
				continue
			case content[ind] == '\t':
				return nil, nil, false
			case isDash(content[ind:]) && (indent < 0 || ind == indent):
				closeItem(off)
				indent = ind
				itemStart = off
				items = append(items, chunk{line: lineNo})
				rest = append(rest, '\n')
				off = end
				continue
			case indent >= 0 && ind > indent && itemStart >= 0:
				rest = append(rest, '\n')
				off = end
				continue
			case ind == 0:
				closeItem(off)
				state = root // the next root key: read below
			default:
				return nil, nil, false
			}
		}
		if ind == 0 && !blank && isItemsKey(content) {
			if sawItems {
				return nil, nil, false
			}
			sawItems, state, indent = true, inItems, -1
			rest = append(rest, "items: []\n"...)
		} else {
			rest = append(rest, line...)
		}
		off = end
	}
	closeItem(len(doc))
	return rest, items, sawItems
}

// isItemsKey reports whether a root line is "items:", perhaps with a
// comment.
func isItemsKey(content []byte) bool {
	rest, ok := bytes.CutPrefix(content, []byte("items:"))
	if !ok {
		return false
	}
	rest = bytes.TrimLeft(rest, " \t")
	return len(rest) == 0 || (rest[0] == '#' && len(rest) < len(content)-len("items:"))
}

// isDash reports whether s starts a block sequence entry.
func isDash(s []byte) bool {
	return len(s) > 0 && s[0] == '-' && (len(s) == 1 || s[1] == ' ' || s[1] == '\t')
}

func yamlKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		return "scalar"
	case yaml.AliasNode:
		return "alias"
	}
	return "node"
}

// yamlSyntaxError places a go-yaml error in the input. go-yaml names the
// start of the construct it was parsing, not where the error is (and counts
// lines from 0 or 1 depending on the kind of error, and leaves the first line
// and bad characters unnamed), so the line is found again: it is the first
// line at which a prefix of the document fails with the same message, from
// where go-yaml's construct starts.
func yamlSyntaxError(err error, doc []byte, start int) error {
	line, msg := yamlErrorLine(err)
	from := 1
	if line > 0 {
		// The 0-based count makes this at most one line early.
		from = yamlLines(doc, 1)(line)
	}
	return errAt(start+locateYAMLError(doc, msg, from)-1, "%s", msg)
}

// locateYAMLError returns the first line, not before line from, such that
// the document cut after it fails to parse with message msg.
func locateYAMLError(doc []byte, msg string, from int) int {
	var ends []int // ends[i] is the offset just past line i+1
	for i, c := range doc {
		if c == '\n' {
			ends = append(ends, i+1)
		}
	}
	if len(doc) > 0 && doc[len(doc)-1] != '\n' {
		ends = append(ends, len(doc))
	}
	fails := func(lines int) bool {
		var n yaml.Node
		err := yaml.NewDecoder(bytes.NewReader(doc[:ends[lines-1]])).Decode(&n)
		if err == nil || err == io.EOF {
			return false
		}
		_, m := yamlErrorLine(err)
		return m == msg
	}
	lo, hi := from-1, len(ends)
	if hi < 1 || lo >= hi || !fails(hi) {
		return max(from, 1)
	}
	if lo >= 1 && fails(lo) {
		return from
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if fails(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}
