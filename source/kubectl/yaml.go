package kubectl

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"strconv"
	"strings"

	apiyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// readYAML reads a stream of YAML documents: apimachinery's YAMLReader
// splits it at the lines that start with ---, and sigs.k8s.io/yaml
// converts each document to JSON, whole. Documents are placed in the input
// by counting lines: YAMLReader hands each document's lines as they were
// (but for the \r of \r\n), less the --- line that ends it.
func (rd *reader) readYAML(r io.Reader) error {
	lines := &lineFeeder{r: bufio.NewReaderSize(r, 64<<10)}
	rd.at = lines.line
	yr := apiyaml.NewYAMLReader(bufio.NewReaderSize(lines, 64<<10))
	for start := 1; ; {
		text, err := yr.Read()
		if err == io.EOF {
			return nil
		}
		var se apiyaml.YAMLSyntaxError
		if errors.As(err, &se) {
			return errAt(lines.line(), "%v: after --- a line may hold only a comment; start the document on the next line", err)
		}
		if err != nil {
			return err
		}
		if err := rd.yamlText(text, start); err != nil {
			return err
		}
		start += bytes.Count(text, []byte{'\n'}) + 1
	}
}

// lineFeeder hands what it reads a line at a time, so that the
// bufio.Reader over it never holds more than the line being read: the lines
// it handed are the lines read, which places an error of the YAMLReader.
type lineFeeder struct {
	r     *bufio.Reader
	rest  []byte // what is left to hand of the line being read
	lines int    // newlines handed
	open  bool   // the last byte handed was not a newline
}

func (f *lineFeeder) Read(p []byte) (int, error) {
	if len(f.rest) == 0 {
		l, err := f.r.ReadSlice('\n')
		if len(l) == 0 {
			return 0, err
		}
		f.rest = l
	}
	n := copy(p, f.rest)
	f.rest = f.rest[n:]
	f.lines += bytes.Count(p[:n], []byte{'\n'})
	f.open = p[n-1] != '\n'
	return n, nil
}

// line returns the line handed last.
func (f *lineFeeder) line() int {
	if f.open {
		return f.lines + 1
	}
	return max(f.lines, 1)
}

// yamlText reads what YAMLReader handed as one document, text, which starts
// at line start of the input. YAMLReader does not know the end marker
// (...), after which another document may start: text is cut there.
func (rd *reader) yamlText(text []byte, start int) error {
	for len(text) > 0 {
		doc, rest := cutDocumentEnd(text)
		if err := rd.yamlDoc(doc, start); err != nil {
			return err
		}
		start += bytes.Count(doc, []byte{'\n'})
		text = rest
	}
	return nil
}

// cutDocumentEnd cuts text after its first line that is an end marker.
func cutDocumentEnd(text []byte) (doc, rest []byte) {
	for i := 0; i < len(text); {
		j := bytes.IndexByte(text[i:], '\n') + 1
		if j == 0 {
			j = len(text) - i
		}
		if isMarker(text[i:i+j], "...") {
			return text[:i+j], text[i+j:]
		}
		i += j
	}
	return text, nil
}

func isMarker(l []byte, m string) bool {
	rest, ok := bytes.CutPrefix(l, []byte(m))
	return ok && (len(rest) == 0 || rest[0] == ' ' || rest[0] == '\t' || rest[0] == '\r' || rest[0] == '\n')
}

// yamlDoc reads one YAML document, text, which starts at line start.
func (rd *reader) yamlDoc(text []byte, start int) error {
	first := firstContent(text)
	if first == 0 {
		return nil // only comments, directives and markers
	}
	line := start + first - 1
	j, err := yaml.YAMLToJSONStrict(text)
	if err != nil {
		return yamlError(err, text, line, start)
	}
	o := object{raw: j, line: line, yaml: true}
	switch j[0] {
	case '{':
	case 'n':
		return nil // "---" followed by nothing
	case '[':
		return errAt(line, "not a Kubernetes object: the document is a list")
	default:
		if isTable(text[first-1:]) {
			return errAt(line, "a table, as kubectl get prints it without -o or with -o wide, not the objects: save them with -o yaml (kubectl get pods,services,endpointslices,nodes,servicecidrs -A -o yaml)")
		}
		return errAt(line, "not a Kubernetes object: the document is a scalar")
	}
	// The header, and how many items a list holds, in one pass.
	var hc struct {
		APIVersion string    `json:"apiVersion"`
		Kind       string    `json:"kind"`
		Metadata   metadata  `json:"metadata"`
		Items      itemCount `json:"items"`
	}
	if err := json.Unmarshal(j, &hc); err != nil {
		return decodeError(o, "", err)
	}
	h := &header{APIVersion: hc.APIVersion, Kind: hc.Kind, Metadata: hc.Metadata}
	var place func(int) int
	if isList(h.Kind) {
		// The JSON holds no lines: the text places the items, when it
		// lays them out as kubectl prints them.
		if lines := itemLines(text); len(lines) == int(hc.Items) {
			place = func(i int) int { return start + lines[i] - 1 }
		}
	}
	return rd.valueOf(o, h, header{}, 0, place)
}

// firstContent returns the line of text (from 1) where the document's
// content starts, past blank lines, comments, directives and a --- line; 0
// when there is none.
func firstContent(text []byte) int {
	n := 0
	for len(text) > 0 {
		n++
		var l []byte
		l, text, _ = bytes.Cut(text, []byte{'\n'})
		l = bytes.TrimLeft(bytes.TrimRight(l, " \t\r"), " \t")
		switch {
		case len(l) == 0, l[0] == '#', l[0] == '%':
		case isMarker(l, "---"), bytes.HasPrefix(l, []byte("--- #")), bytes.HasPrefix(l, []byte("---\t#")):
		default:
			return n
		}
	}
	return 0
}

// itemCount is the number of items in a list's JSON, or -1 when items is
// not a list.
type itemCount int

// UnmarshalJSON counts the values of a JSON array without decoding them.
func (c *itemCount) UnmarshalJSON(b []byte) error {
	*c = -1
	if len(b) == 0 || b[0] != '[' {
		return nil
	}
	n, depth, str, esc, empty := 0, 0, false, false, true
	for _, ch := range b {
		switch {
		case esc:
			esc = false
		case str && ch == '\\':
			esc = true
		case str:
			str = ch != '"'
		case ch == ' ', ch == '\t', ch == '\r', ch == '\n':
		case ch == ',' && depth == 1:
			n++
		case ch == ']' || ch == '}':
			depth--
		default:
			if depth == 1 {
				empty = false
			}
			if ch == '[' || ch == '{' {
				depth++
			}
			str = ch == '"'
		}
	}
	if !empty {
		n++
	}
	*c = itemCount(n)
	return nil
}

// itemLines returns the lines of text (from 1) where the items of a list
// start, when the text lays them out as kubectl prints them: items: as a
// key of the root mapping, then a block sequence, one entry per line that
// starts with "- " at the sequence's indentation. Another layout may
// return lines that are no entries: the caller checks how many it found.
func itemLines(text []byte) []int {
	var lines []int
	in, indent := false, -1
	for n := 1; len(text) > 0; n++ {
		var l []byte
		l, text, _ = bytes.Cut(text, []byte{'\n'})
		l = bytes.TrimRight(l, " \t\r")
		ind := len(l) - len(bytes.TrimLeft(l, " "))
		if ind == len(l) || l[ind] == '#' || l[ind] == '\t' {
			continue // blank, a comment, or text within an entry
		}
		switch {
		case !in:
			in = ind == 0 && isItemsKey(l)
		case isDash(l[ind:]) && (indent < 0 || ind == indent):
			indent = ind
			lines = append(lines, n)
		case ind == 0:
			return lines // the next key of the root mapping
		}
	}
	return lines
}

// isItemsKey reports whether a line is "items:", perhaps with a comment.
func isItemsKey(l []byte) bool {
	rest, ok := bytes.CutPrefix(l, []byte("items:"))
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

// yamlErrorText matches the line go-yaml names in its errors: "yaml: line
// 3: ...", or "yaml: unmarshal errors:\n  line 3: ..." for each of several.
var yamlErrorText = regexp.MustCompile(`^(?:yaml: )?(?:unmarshal errors:\n\s*)?line (\d+): ([^\n]*)`)

// yamlError places an error of the YAML decoder reading text, which starts
// at line start of the input; first stands for an error that names no
// line. An error at the end of text may name the line after it: the last
// line stands for it.
func yamlError(err error, text []byte, first, start int) error {
	m := yamlErrorText.FindStringSubmatch(err.Error())
	if m == nil {
		return errAt(first, "%s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	n, _ := strconv.Atoi(m[1])
	last := bytes.Count(bytes.TrimSuffix(text, []byte{'\n'}), []byte{'\n'}) + 1
	return errAt(start+min(max(n, 1), last)-1, "%s", m[2])
}

// isTable reports whether text starts as kubectl get's table does: a
// header of capitalised column names, NAME (after NAMESPACE with -A) first.
func isTable(text []byte) bool {
	head, _, _ := bytes.Cut(text, []byte("\n"))
	f := strings.Fields(string(head))
	if len(f) < 2 || (f[0] != "NAME" && f[0] != "NAMESPACE") {
		return false
	}
	for _, c := range f {
		if strings.ToUpper(c) != c {
			return false
		}
	}
	return true
}
