package buildinfo

import "testing"

func TestRef(t *testing.T) {
	for _, tc := range []struct {
		info Info
		want string
	}{
		{Info{Version: "v0.3.1", Commit: "abc"}, "v0.3.1"},
		{Info{Version: "v0.0.0-20261123101500-0123456789ab", Commit: "0123456789abcdef"}, "0123456789abcdef"},
		{Info{Version: "v1.2.4-0.20261123101500-0123456789ab", Commit: "0123456789abcdef"}, "0123456789abcdef"},
		{Info{Version: "v1.3.0-rc.1", Commit: "0123456789abcdef"}, "v1.3.0-rc.1"},
		{Info{Version: "dev", Commit: "0123456789abcdef"}, "0123456789abcdef"},
		{Info{Version: "dev", Commit: "0123456789abcdef", Modified: true}, "main"},
		{Info{Version: "dev"}, "main"},
	} {
		if got := tc.info.Ref(); got != tc.want {
			t.Errorf("%+v: Ref %q, want %q", tc.info, got, tc.want)
		}
	}
	// A test binary records no VCS state: the docs of main.
	if got := DocURL("docs/runbooks/x.md"); got != Repository+"/blob/main/docs/runbooks/x.md" {
		t.Errorf("DocURL = %q", got)
	}
}
