// Package text holds the small wording helpers the reports share.
package text

import "strconv"

// Count renders n with its noun: "1 entry", "2 entries", "0 entries".
func Count(n int, singular, plural string) string {
	if n == 1 {
		return "1 " + singular
	}
	return strconv.Itoa(n) + " " + plural
}
