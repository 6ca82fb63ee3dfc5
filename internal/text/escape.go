package text

import (
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Escape returns s with every character a terminal would act on or hide
// written as Go writes it in a quoted string: control characters (ESC as
// \x1b, a newline as \n, a carriage return as \r, a tab as \t, the C1
// range as \u0085 ...), Unicode format characters (the bidirectional
// overrides and isolates U+202A-U+202E and U+2066-U+2069, zero-width
// characters) and line and paragraph separators as \uXXXX, and bytes
// that are not UTF-8 as \xNN. Everything else, letters of any script
// included, is kept, and a string with nothing to escape is returned as
// it is.
//
// Human-readable output passes every string it did not write itself
// through Escape: a name, a message or an error from a cluster, a gossip
// member or a bundle may hold a sequence that recolours the terminal,
// moves the cursor or starts a line that looks like one of ours. A
// backslash is kept as it is: the escapes make what was hidden visible,
// they do not make the text reversible (JSON and YAML output are, and
// their encoders escape on their own).
func Escape(s string) string {
	i := 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !printable(r, size) {
			break
		}
		i += size
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case printable(r, size):
			b.WriteString(s[i : i+size])
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		default:
			q := strconv.QuoteRune(r) // '\x1b', '\n', '\u202e'
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}

// printable reports whether the rune r, size bytes of UTF-8, is shown as
// itself: a valid rune that strconv.IsPrint accepts (which refuses
// control, format and separator characters, the ASCII space excepted).
func printable(r rune, size int) bool {
	if r == utf8.RuneError && size == 1 {
		return false
	}
	return strconv.IsPrint(r)
}

// Fprintf is fmt.Fprintf with every string and error among args passed
// through Escape first (an error as its message, a value of a string type
// of its own as its string): the format is the caller's own layout,
// newlines and tabs included, and the values are what it did not write.
// Other values, and values whose type has a String method, are formatted
// as they are: numbers, times, addresses and ghostwatch's own types print
// nothing a terminal acts on.
func Fprintf(w io.Writer, format string, args ...any) (int, error) {
	escaped := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case string:
			escaped[i] = Escape(v)
		case error:
			escaped[i] = Escape(v.Error())
		case fmt.Stringer:
			escaped[i] = a
		default:
			if rv := reflect.ValueOf(a); rv.Kind() == reflect.String {
				escaped[i] = Escape(rv.String())
			} else {
				escaped[i] = a
			}
		}
	}
	return fmt.Fprintf(w, format, escaped...)
}
