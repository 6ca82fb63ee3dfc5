package release

import "testing"

func TestCheckVersion(t *testing.T) {
	for _, tc := range []struct {
		version string
		ok      bool
	}{
		{"v0.1.0", true},
		{"v1.12.3-rc.1", true},
		{"v1.0.0+build.5", true},
		{"0.1.0", false},
		{"v0.1", false},
		{"v01.1.0", false},
		{"latest", false},
		{"", false},
	} {
		if err := CheckVersion(tc.version); (err == nil) != tc.ok {
			t.Errorf("CheckVersion(%q) = %v, want ok %v", tc.version, err, tc.ok)
		}
	}
}
