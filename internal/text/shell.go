package text

import "strings"

// ShellQuote renders s as one word of a POSIX shell command a user may
// paste: as it is when it holds nothing a shell reads specially, else in
// single quotes, a quote within it closed, escaped and reopened. A name read from a ledger
// ("x; curl ...|sh") so stays an argument, never a command.
func ShellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool { return !shellSafe(r) }) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// shellSafe reports whether r means nothing to a shell in a word.
func shellSafe(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return true
	}
	return strings.ContainsRune("-_./:@%+=,", r)
}
