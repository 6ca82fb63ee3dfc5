// Package text holds the small wording helpers the reports share, and
// Escape, through which every human-readable output passes the strings it
// did not write itself. It formats; it never decides what is shown.
package text

import (
	"strconv"
	"strings"
	"time"
)

// Count renders n with its noun: "1 entry", "2 entries", "0 entries".
func Count(n int, singular, plural string) string {
	if n == 1 {
		return "1 " + singular
	}
	return strconv.Itoa(n) + " " + plural
}

// Duration renders a length of time the way a person reads one at a
// glance, to the second: "4d23h", "2h5m", "1m30s", "45s".
func Duration(d time.Duration) string {
	s := int64(d / time.Second)
	switch {
	case s >= 86400:
		return strconv.FormatInt(s/86400, 10) + "d" + strconv.FormatInt(s%86400/3600, 10) + "h"
	case s >= 3600:
		return strconv.FormatInt(s/3600, 10) + "h" + strconv.FormatInt(s%3600/60, 10) + "m"
	case s >= 60:
		return strconv.FormatInt(s/60, 10) + "m" + strconv.FormatInt(s%60, 10) + "s"
	}
	return strconv.FormatInt(s, 10) + "s"
}

// List joins the first max items with commas and says how many more there
// are: "a, b, c and 4 more".
func List(items []string, max int) string {
	if len(items) <= max {
		return strings.Join(items, ", ")
	}
	return strings.Join(items[:max], ", ") + " and " + strconv.Itoa(len(items)-max) + " more"
}
