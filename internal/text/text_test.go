package text

import "testing"

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
