package cli

import (
	"strings"
	"testing"
)

// The user information of an address the user gave (a token given as the
// user name, a password) is printed nowhere: not on stdout, not on
// stderr, not in the error, whether the address is a Consul agent's, a
// Serf agent's RPC, a controller replica's or the API server's, and
// whichever way it cannot be reached. net/http quotes the URL asked in its
// errors with the user name kept.
func TestAddressesAreRedactedEverywhere(t *testing.T) {
	objects := "testdata/scan/gossip-reuse/objects.yaml"
	for _, addr := range []string{"https://SECRETTOKEN@127.0.0.1:1", "http://user:SECRETPW@127.0.0.1:1"} {
		plain := strings.Replace(strings.Replace(addr, "https://", "", 1), "http://", "", 1)
		for _, args := range [][]string{
			{"scan", "--kube-objects", objects, "--rule", "gossip-ghost-member", "--consul", addr},
			{"scan", "--kube-objects", objects, "--rule", "gossip-ghost-member", "--consul", addr, "-o", "json"},
			{"scan", "--kube-objects", objects, "--rule", "gossip-ghost-member", "--consul", addr + "/%zz"},
			{"scan", "--kube-objects", objects, "--rule", "gossip-ghost-member", "--serf", plain},
			{"scan", "--rule", "duplicate-pod-ip", "--server", addr, "--insecure-skip-tls-verify", "--token", "x", "--sync-timeout", "3s"},
			{"scan", "--rule", "duplicate-pod-ip", "--server", addr, "--insecure-skip-tls-verify", "--sync-timeout", "3s", "-o", "yaml"},
			{"ip", "10.244.3.47", "--history-url", addr, "--flows-url", addr, "--server", addr, "--insecure-skip-tls-verify", "--token", "x", "--timeout", "3s"},
			{"ip", "10.244.3.47", "--history-url", plain, "--server", "https://127.0.0.1:1"},
		} {
			t.Setenv("CONSUL_HTTP_TOKEN", "")
			code, out, errOut := run(t, "", args...)
			if code != ExitError {
				t.Errorf("%v: exit %d, want %d; stderr %s", args, code, ExitError, errOut)
			}
			if strings.Contains(out+errOut, "SECRET") || !strings.Contains(out+errOut, "xxxxx@127.0.0.1:1") {
				t.Errorf("%v: exit %d\nstdout: %s\nstderr: %s", args, code, out, errOut)
			}
		}
	}
}
