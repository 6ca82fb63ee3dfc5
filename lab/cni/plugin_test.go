package cni

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestFindHostLocal(t *testing.T) {
	t.Setenv(BinEnv, "")
	t.Setenv("GHOSTWATCH_KUBE_CACHE", t.TempDir()) // an empty build cache
	if _, err := FindHostLocal(); !errors.Is(err, ErrNoBinary) {
		t.Errorf("unset: %v, want ErrNoBinary", err)
	}
	dir := t.TempDir()
	t.Setenv(BinEnv, dir)
	if _, err := FindHostLocal(); err == nil || errors.Is(err, ErrNoBinary) || !strings.Contains(err.Error(), HostLocalBinary) {
		t.Errorf("without host-local: %v, want an error naming it", err)
	}
	bin := filepath.Join(dir, HostLocalBinary)
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := FindHostLocal(); err == nil || errors.Is(err, ErrNoBinary) {
		t.Errorf("not executable: %v, want an error", err)
	}
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := FindHostLocal(); err != nil || got != bin {
		t.Errorf("built: %q, %v", got, err)
	}
}

// fakePlugin writes a shell script that records its environment and stdin
// in dir and then runs body.
func fakePlugin(t *testing.T, body string) (bin, dir string) {
	t.Helper()
	dir = t.TempDir()
	bin = filepath.Join(dir, "fake")
	script := "#!/bin/sh\nenv > " + dir + "/env\ncat > " + dir + "/stdin\n" + body + "\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, dir
}

func TestPluginPassesTheCallAsARuntimeDoes(t *testing.T) {
	bin, dir := fakePlugin(t, `printf '{"cniVersion":"1.0.0","ips":[{"address":"10.244.2.7/24","gateway":"10.244.2.1"},{"address":"fd00::7/64"}]}'`)
	t.Setenv("CNI_NETNS_OVERRIDE", "1") // the caller's own CNI_* never reach the plugin
	t.Setenv("GHOSTWATCH_CNI_TEST", "kept")
	p := Plugin{Bin: bin, Config: []byte(`{"cniVersion":"1.0.0","name":"gw"}`)}
	c := Container{ID: "c1", Netns: "/var/run/netns/gwcni-x", IfName: "eth0", Args: PodArgs("default", "web-0")}
	r, err := p.Add(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	want := &Result{CNIVersion: "1.0.0", IPs: []IP{
		{netip.MustParsePrefix("10.244.2.7/24"), netip.MustParseAddr("10.244.2.1")},
		{netip.MustParsePrefix("fd00::7/64"), netip.Addr{}},
	}}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("result %+v, want %+v", r, want)
	}
	stdin, err := os.ReadFile(filepath.Join(dir, "stdin"))
	if err != nil {
		t.Fatal(err)
	}
	if string(stdin) != string(p.Config) {
		t.Errorf("stdin %q, want the configuration %q", stdin, p.Config)
	}
	env := readEnv(t, dir)
	for _, kv := range []string{
		"CNI_COMMAND=ADD",
		"CNI_CONTAINERID=c1",
		"CNI_NETNS=/var/run/netns/gwcni-x",
		"CNI_IFNAME=eth0",
		"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0",
		"CNI_PATH=" + dir,
		"GHOSTWATCH_CNI_TEST=kept",
	} {
		if !slices.Contains(env, kv) {
			t.Errorf("environment lacks %s: %q", kv, env)
		}
	}
	if slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "CNI_NETNS_OVERRIDE=") }) {
		t.Errorf("the caller's CNI_NETNS_OVERRIDE reached the plugin: %q", env)
	}

	// DEL without a namespace and without arguments sets neither variable.
	if err := p.Del(t.Context(), Container{ID: "c1", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	env = readEnv(t, dir)
	if !slices.Contains(env, "CNI_COMMAND=DEL") {
		t.Errorf("DEL: environment %q", env)
	}
	for _, k := range []string{"CNI_NETNS=", "CNI_ARGS="} {
		if slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, k) }) {
			t.Errorf("DEL: %s set though empty: %q", k, env)
		}
	}
	if err := p.Check(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	if env := readEnv(t, dir); !slices.Contains(env, "CNI_COMMAND=CHECK") {
		t.Errorf("CHECK: environment %q", env)
	}
}

func readEnv(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "env"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func TestPluginFailures(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       *Error // nil: not a CNI error
		msg        string // the error's text
	}{{
		name: "CNI error",
		body: `printf '{"code": 7, "msg": "invalid characters found in network name", "details": "a b"}'; exit 1`,
		want: &Error{Plugin: "fake", Command: CmdAdd, ContainerID: "c1", Code: 7, Msg: "invalid characters found in network name", Details: "a b"},
		msg:  "fake ADD of container c1: CNI error 7: invalid characters found in network name (a b)",
	}, {
		name: "result then error",
		body: `printf '{"cniVersion":"1.0.0","ips":[{"address":"10.244.2.2/24","gateway":"10.244.2.1"}]}{"code":8,"msg":"own netns"}'; exit 1`,
		want: &Error{Plugin: "fake", Command: CmdAdd, ContainerID: "c1", Code: 8, Msg: "own netns",
			Result: &Result{CNIVersion: "1.0.0", IPs: []IP{{netip.MustParsePrefix("10.244.2.2/24"), netip.MustParseAddr("10.244.2.1")}}}},
		msg: "fake ADD of container c1: CNI error 8: own netns",
	}, {
		name: "exit without a CNI error",
		body: `echo oops; echo broken >&2; exit 3`,
		msg:  `fake ADD of container c1: exit status 3 without a CNI error: stdout "oops\n", stderr "broken\n"`,
	}, {
		name: "JSON without a code",
		body: `printf '{"msg":"no code"}'; exit 1`,
		msg:  `fake ADD of container c1: exit status 1 without a CNI error: stdout "{\"msg\":\"no code\"}", stderr ""`,
	}, {
		name: "success that is not a result",
		body: `echo oops`,
		msg:  `fake ADD of container c1: result "oops\n": invalid character 'o' looking for beginning of value`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			bin, _ := fakePlugin(t, tc.body)
			r, err := Plugin{Bin: bin, Config: []byte(`{}`)}.Add(t.Context(), Container{ID: "c1", IfName: "eth0"})
			if err == nil {
				t.Fatalf("succeeded with %+v", r)
			}
			if err.Error() != tc.msg {
				t.Errorf("error %q, want %q", err, tc.msg)
			}
			var e *Error
			if errors.As(err, &e) != (tc.want != nil) {
				t.Fatalf("error %#v: a CNI error is %v, want %v", err, e != nil, tc.want != nil)
			}
			if tc.want != nil && !reflect.DeepEqual(e, tc.want) {
				t.Errorf("error %+v, want %+v", e, tc.want)
			}
		})
	}
}

func TestPluginCanceled(t *testing.T) {
	bin, _ := fakePlugin(t, `exit 0`)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := (Plugin{Bin: bin}).Add(ctx, Container{ID: "c1", IfName: "eth0"}); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %v, want context.Canceled", err)
	}
}

func TestCNIArgs(t *testing.T) {
	if _, err := (Plugin{Bin: "/nonexistent"}).Add(t.Context(), Container{ID: "c1", IfName: "eth0", Args: []Arg{{"K", "a;b"}}}); err == nil || !strings.Contains(err.Error(), "CNI_ARGS") {
		t.Errorf("a value with ';': %v, want a CNI_ARGS error", err)
	}
	if got, err := cniArgs(nil); got != "" || err != nil {
		t.Errorf("no args: %q, %v", got, err)
	}
}
