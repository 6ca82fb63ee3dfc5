package text

import (
	"testing"
	"time"
)

func TestCount(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{{0, "0 entries"}, {1, "1 entry"}, {2, "2 entries"}, {-1, "-1 entries"}} {
		if got := Count(tc.n, "entry", "entries"); got != tc.want {
			t.Errorf("Count(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

func TestDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		431999 * time.Second: "4d23h", 7500 * time.Second: "2h5m", 90 * time.Second: "1m30s",
		45 * time.Second: "45s", 0: "0s", 1500 * time.Millisecond: "1s",
	} {
		if got := Duration(d); got != want {
			t.Errorf("Duration(%s) = %q, want %q", d, got, want)
		}
	}
}
