package gossip

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMemberName(t *testing.T) {
	dir := t.TempDir()
	uidFile := filepath.Join(dir, "uid")
	if err := os.WriteFile(uidFile, []byte("6c1f0a52-9d3e-4b7a-8f21-0c5d2e9b7a44\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	unreadable := filepath.Join(dir, "dir-not-file")
	if err := os.Mkdir(unreadable, 0o755); err != nil {
		t.Fatal(err)
	}
	const uid = "3f2a1b9c-1d2e-4f50-9a6b-7c8d9e0f1a2b"
	random := strings.NewReader("\x01\x02\x03\x04\x05\x06")
	for _, tc := range []struct {
		name     string
		env      map[string]string
		file     string
		hostname string
		want     string
		from     string
		err      string
	}{
		{"POD_NAME and POD_UID", map[string]string{"POD_NAME": "cache-0", "POD_UID": uid}, "", "cache-0", "cache-0-" + uid, "$POD_NAME and $POD_UID", ""},
		{"the UID file when POD_UID is not set", map[string]string{"POD_NAME": "cache-0"}, uidFile, "", "cache-0-6c1f0a52-9d3e-4b7a-8f21-0c5d2e9b7a44", "$POD_NAME and " + uidFile, ""},
		{"POD_UID before the file", map[string]string{"POD_UID": uid}, uidFile, "cache-0", "cache-0-" + uid, "the host name and $POD_UID", ""},
		{"the host name when POD_NAME is not set", map[string]string{"POD_UID": " " + uid + "\n"}, "", "web-7d9f8-x2x9q", "web-7d9f8-x2x9q-" + uid, "the host name and $POD_UID", ""},
		{"no UID: POD_NAME and a random suffix", map[string]string{"POD_NAME": "cache-0"}, "", "h", "cache-0-010203040506", "$POD_NAME and a random suffix", ""},
		{"no UID, no POD_NAME: the host name and a random suffix", nil, "", "cache-0", "cache-0-010203040506", "the host name and a random suffix", ""},
		{"a host name spelling an IP is left out", map[string]string{"POD_UID": uid}, "", "ip-10-0-1-50.ec2.internal", uid, "$POD_UID", ""},
		{"so is a host name that is an IP", nil, "", "10.0.1.50", "010203040506", "a random suffix", ""},
		{"so is a pod name spelling one", map[string]string{"POD_NAME": "node_10_0_1_50", "POD_UID": uid}, "", "", uid, "$POD_UID", ""},
		{"no prefix at all", map[string]string{"POD_UID": uid}, "", "", uid, "$POD_UID", ""},
		{"a UID file that cannot be read", nil, unreadable, "cache-0", "", "", "reading the pod UID from " + unreadable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			random.Reset("\x01\x02\x03\x04\x05\x06")
			file := tc.file
			if file == "" {
				file = filepath.Join(dir, "absent")
			}
			id := Identity{
				Getenv:   func(k string) string { return tc.env[k] },
				UIDFile:  file,
				Hostname: func() (string, error) { return tc.hostname, nil },
				Random:   random,
			}
			got, err := id.MemberName()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Name != tc.want || got.From != tc.from {
				t.Errorf("MemberName() = %q from %q, want %q from %q", got.Name, got.From, tc.want, tc.from)
			}
			if spellsIP(got.Name) {
				t.Errorf("%q spells an IP address", got.Name)
			}
		})
	}
}

func TestMemberNameRandomIsFresh(t *testing.T) {
	id := Identity{Getenv: func(string) string { return "" }, UIDFile: filepath.Join(t.TempDir(), "absent"),
		Hostname: func() (string, error) { return "", errors.New("no host name") }}
	a, err := id.MemberName()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := id.MemberName()
	if a.Name == b.Name || len(a.Name) != 12 {
		t.Errorf("two names %q and %q: want two different 12-digit random names", a.Name, b.Name)
	}
}

func TestSpellsIP(t *testing.T) {
	for s, want := range map[string]bool{
		"10.0.1.50": true, "ip-10-0-1-50": true, "node_10_0_1_50": true, "fd00::1": true,
		"cache-0": false, "web-7d9f8-x2x9q": false, "3f2a1b9c-1d2e-4f50-9a6b-7c8d9e0f1a2b": false,
		"v1.2.3": false, "1-2-3-4567": false,
	} {
		if got := spellsIP(s); got != want {
			t.Errorf("spellsIP(%q) = %v, want %v", s, got, want)
		}
	}
}
