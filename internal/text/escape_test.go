package text

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestEscape(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"cache-3-93cc2978", "cache-3-93cc2978"},
		{"café ünïcödé 名前 ☃", "café ünïcödé 名前 ☃"},
		{`a\nb`, `a\nb`}, // a backslash is kept: only what was hidden is shown
		{"x\x1b[31m\ncritical  forged", `x\x1b[31m\ncritical  forged`},
		{"a\rb\tc\x00d\x7fe", `a\rb\tc\x00d\x7fe`},
		{"\u0085\u009b31m", `\u0085\u009b31m`},                                 // C1: NEL, CSI
		{"abc\u202edcba", `abc\u202edcba`},                                     // right-to-left override
		{"\u2066x\u2069\u200b\u200e\ufeff", `\u2066x\u2069\u200b\u200e\ufeff`}, // isolates, zero width, LRM, BOM
		{"line\u2028next\u2029", `line\u2028next\u2029`},
		{"bad\xffbyte\xc3", `bad\xffbyte\xc3`},
		{"nbsp\u00a0", `nbsp\u00a0`},
	} {
		if got := Escape(tc.in); got != tc.want {
			t.Errorf("Escape(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// A string type of its own, without a String method.
type state string

func TestFprintf(t *testing.T) {
	var b strings.Builder
	Fprintf(&b, "%s\t%v %d %s %s %s\n", "pod\nx", errors.New("no\x1b[2J"), 7, strconv.Itoa(8), state("up\r"), time.Second)
	if got, want := b.String(), "pod\\nx\tno\\x1b[2J 7 8 up\\r 1s\n"; got != want {
		t.Errorf("Fprintf wrote %q, want %q", got, want)
	}
}

// Whatever the input, the output is valid UTF-8 of printable runes only,
// and an input of printable runes only comes back unchanged.
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"", "ok", "x\x1b[31m\ncritical", "\u202e\u2066", "\xff\xfe", "a\\x1b", "\u0085"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := Escape(s)
		if !utf8.ValidString(got) {
			t.Fatalf("Escape(%q) = %q: not UTF-8", s, got)
		}
		for _, r := range got {
			if !strconv.IsPrint(r) {
				t.Fatalf("Escape(%q) = %q holds %U", s, got, r)
			}
		}
		if printableOnly(s) && got != s {
			t.Fatalf("Escape(%q) = %q, want it unchanged", s, got)
		}
	})
}

func printableOnly(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !strconv.IsPrint(r) {
			return false
		}
	}
	return true
}
