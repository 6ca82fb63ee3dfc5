package realnode

import (
	"strings"
	"testing"
)

// mountinfo escapes a space, a tab, a newline and a backslash in a mount
// point as octal; anything else stays as it is.
func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/tmp/a\040b`:     "/tmp/a b",
		`/tmp/tab\011end`: "/tmp/tab\tend",
		`/tmp/back\134`:   `/tmp/back\`,
		`/tmp/plain`:      "/tmp/plain",
		`/tmp/short\04`:   `/tmp/short\04`,
		`/tmp/notoct\089`: `/tmp/notoct\089`,
		`\`:               `\`,
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzUnescapeMount(f *testing.F) {
	for _, s := range []string{`/tmp/a\040b`, `\`, `\\`, `\777`, `/x\0`, ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := unescapeMount(s)
		if len(got) > len(s) {
			t.Errorf("unescapeMount(%q) = %q grew", s, got)
		}
		if !strings.Contains(s, `\`) && got != s {
			t.Errorf("unescapeMount(%q) = %q changed a string without an escape", s, got)
		}
	})
}
