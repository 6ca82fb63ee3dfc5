package labcmd

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/ghostwatch/ghostwatch/internal/cmdline"
	"github.com/ghostwatch/ghostwatch/lab/build"
)

// notBuiltKube is what a lab says when the Kubernetes binaries are not
// built and it may not build them.
const notBuiltKube = "the Kubernetes binaries are not built: build them with `ghostwatch-lab build kube` (about 10 minutes, once), " +
	"or pass --build to build them first (in a checkout, scripts/kube-binaries.sh builds the same); " +
	"or name a directory holding them with --kube-bin or $GHOSTWATCH_KUBE_BIN"

// fakeBuilder answers the prompt's terminal question with tty, and
// records the sets it is asked to build; each build prints a line of
// progress and returns dir (a directory under the cache, named after the
// set, that holds nothing), or err.
type fakeBuilder struct {
	tty   bool
	dir   string
	err   error
	built []string
}

func (f *fakeBuilder) builder() builder {
	return builder{
		interactive: func(io.Reader) bool { return f.tty },
		build: func(_ context.Context, s build.Set, progress io.Writer) (string, error) {
			f.built = append(f.built, s.Name)
			io.WriteString(progress, "["+s.Name+" 0s] "+s.Name+": building ...\n")
			if f.err != nil {
				return "", f.err
			}
			return filepath.Join(f.dir, s.Name), nil
		},
	}
}

// emptyCache points the build cache at an empty directory and unsets the
// variables that name the sets' directories.
func emptyCache(t *testing.T) string {
	t.Helper()
	cache := t.TempDir()
	t.Setenv("GHOSTWATCH_KUBE_CACHE", cache)
	for _, s := range build.Sets {
		t.Setenv(s.Env, "")
	}
	return cache
}

// build's help lists every set with its binaries and how long a cold
// build takes, what a build needs, and that a lab asks or takes --build.
func TestBuildCommandHelp(t *testing.T) {
	code, out, errOut := run(t, "", "build", "--help")
	for _, want := range []string{
		"ghostwatch-lab build {kube|calico|cni|crictl|prometheus|consul|all}...",
		"$GHOSTWATCH_KUBE_CACHE, default /var/cache/ghostwatch",
		"  kube    etcd, kube-apiserver, kube-controller-manager, kube-proxy\n          about 10 minutes on 2 cores; ~1 GB of module cache and ~4 GB of build cache",
		"  calico  calico-kube-controllers, calicoctl, calico-ipam\n          about 8 minutes",
		"  cni     host-local\n          about 15 seconds",
		"  crictl  crictl\n          about 2 minutes",
		"  consul  consul\n          about 10 minutes",
		"the go command on PATH, bash, and network to the Go module proxy",
		"a checkout is not needed", "asks to build it when stdin is a terminal", "--build",
	} {
		if code != cmdline.ExitOK || !strings.Contains(out, want) {
			t.Errorf("build --help (exit %d, stderr %q) lacks %q:\n%s", code, errOut, want, out)
		}
	}
	code, out, _ = run(t, "", "__complete", "build", "")
	if names, _, _ := strings.Cut(out, ":"); code != cmdline.ExitOK || names != "kube\ncalico\ncni\ncrictl\nprometheus\nconsul\nall\n" {
		t.Errorf("completing build: %q", out)
	}
}

// build builds what it is named, each set once and in order, saying
// beforehand what, where and how long, then the directory on stdout; it
// refuses no name, an unknown one, and a cache it cannot write, before
// building anything.
func TestBuildCommand(t *testing.T) {
	cache := emptyCache(t)
	f := &fakeBuilder{dir: cache}
	code, out, errOut := runWith(t, f.builder(), "", "build", "cni", "all", "cni")
	if code != cmdline.ExitOK || !slices.Equal(f.built, []string{"cni", "kube", "calico", "crictl", "prometheus", "consul"}) {
		t.Fatalf("build cni all cni: exit %d, built %v, stderr %q", code, f.built, errOut)
	}
	if want := strings.Join([]string{cache + "/cni", cache + "/kube", cache + "/calico", cache + "/crictl", cache + "/prometheus", cache + "/consul", ""}, "\n"); out != want {
		t.Errorf("stdout %q, want %q", out, want)
	}
	wantErr := "building the CNI host-local plugin (host-local) into " + cache + ": about 15 seconds on 2 cores; ~20 MB of module cache and ~80 MB of build cache; " +
		"it needs the go command on PATH, bash, and network to the Go module proxy\n[cni 0s] cni: building ...\n" +
		"building the Kubernetes binaries (etcd, kube-apiserver, kube-controller-manager, kube-proxy) into " + cache + ": about 10 minutes on 2 cores;"
	if !strings.HasPrefix(errOut, wantErr) {
		t.Errorf("stderr:\n%s\nwant it to start:\n%s", errOut, wantErr)
	}

	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cache string
		args  []string
		want  string
	}{
		{args: []string{"build"}, want: "ghostwatch: name what to build: kube, calico, cni, crictl, prometheus, consul, all\n"},
		{args: []string{"build", "kube", "k8s"}, want: "ghostwatch: nothing called \"k8s\" to build: want kube, calico, cni, crictl, prometheus, consul, all\n"},
		{cache: file, args: []string{"build", "kube"},
			want: "ghostwatch: the build cache " + file + " is not writable (mkdir " + file + ": not a directory): set GHOSTWATCH_KUBE_CACHE to a directory you can write, or build as root\n"},
	} {
		if tc.cache != "" {
			t.Setenv("GHOSTWATCH_KUBE_CACHE", tc.cache)
		}
		f := &fakeBuilder{dir: cache}
		code, out, errOut := runWith(t, f.builder(), "", tc.args...)
		if code != cmdline.ExitError || out != "" || errOut != tc.want || len(f.built) > 0 {
			t.Errorf("%s: exit %d, stdout %q, stderr %q, built %v; want %q", strings.Join(tc.args, " "), code, out, errOut, f.built, tc.want)
		}
	}
}

// A lab that lacks a set: without a terminal and without --build it stops
// with the set's NotBuilt error, building nothing; with --build it builds
// the set without asking and runs from the built directory; on a terminal
// it asks, and builds on yes only.
func TestLabBuildsWhatItLacks(t *testing.T) {
	cache := emptyCache(t)
	for _, tc := range []struct {
		name   string
		tty    bool
		stdin  string
		args   []string
		built  []string
		asked  string // the set the question names
		errOut string // stderr's end
	}{
		{name: "non-interactive", args: []string{"calico-misbook"},
			errOut: "ghostwatch: " + notBuiltKube + "\n"},
		{name: "non-interactive conntrack", args: []string{"conntrack-deploy", "--control-plane=real"},
			errOut: "ghostwatch: " + notBuiltKube + "\n"},
		{name: "non-interactive cni", args: []string{"hostlocal-wipe"},
			errOut: "ghostwatch: the CNI host-local plugin is not built: build it with `ghostwatch-lab build cni` (about 15 seconds, once), or pass --build to build it first (in a checkout, scripts/cni-plugins.sh builds the same); or name a directory holding it with --cni-bin or $GHOSTWATCH_CNI_BIN\n"},
		// The lab then runs from what was built: the fake's empty
		// directory, which the lab names.
		{name: "--build", args: []string{"calico-misbook", "--build"}, built: []string{"kube", "calico"},
			errOut: "[calico 0s] calico: building ...\nghostwatch: --kube-bin " + cache + "/kube has no executable etcd: run scripts/kube-binaries.sh\n"},
		{name: "--build cni", args: []string{"hostlocal-wipe", "--build"}, built: []string{"cni"},
			errOut: "[cni 0s] cni: building ...\nghostwatch: --cni-bin " + cache + "/cni: stat " + cache + "/cni/host-local: no such file or directory: build host-local with scripts/cni-plugins.sh\n"},
		{name: "yes", tty: true, stdin: "y\n", args: []string{"hostlocal-wipe"}, built: []string{"cni"}, asked: "cni",
			errOut: "[cni 0s] cni: building ...\nghostwatch: --cni-bin " + cache + "/cni: stat " + cache + "/cni/host-local: no such file or directory: build host-local with scripts/cni-plugins.sh\n"},
		{name: "no", tty: true, stdin: "n\n", args: []string{"conntrack-pool", "--control-plane=real"}, asked: "kube",
			errOut: "Build now into " + cache + "? [y/N] ghostwatch: " + notBuiltKube + "\n"},
		{name: "no answer", tty: true, args: []string{"conntrack-pool", "--control-plane=real"}, asked: "kube",
			errOut: "Build now into " + cache + "? [y/N] ghostwatch: " + notBuiltKube + "\n"},
		{name: "memory", args: []string{"conntrack-pool", "--control-plane=nope"},
			errOut: "ghostwatch: control plane \"nope\": want memory or real\n"},
	} {
		f := &fakeBuilder{tty: tc.tty, dir: cache}
		code, out, errOut := runWith(t, f.builder(), tc.stdin, tc.args...)
		if code != cmdline.ExitError || out != "" || !strings.HasSuffix(errOut, tc.errOut) || !slices.Equal(f.built, tc.built) {
			t.Errorf("%s: ghostwatch-lab %s: exit %d, built %v, stdout %q, stderr:\n%s\nwant built %v, stderr ending %q",
				tc.name, strings.Join(tc.args, " "), code, f.built, out, errOut, tc.built, tc.errOut)
		}
		question := ""
		if tc.asked != "" {
			question = build.MustLookup(tc.asked).Question(cache)
		}
		if asked := strings.Contains(errOut, "? [y/N] "); asked != (question != "") || !strings.Contains(errOut, question) {
			t.Errorf("%s: stderr %q; want the question %q", tc.name, errOut, question)
		}
		for _, s := range tc.built {
			if plan := build.MustLookup(s).Plan(cache); !strings.Contains(errOut, plan+"\n") {
				t.Errorf("%s: stderr %q does not say beforehand %q", tc.name, errOut, plan)
			}
		}
	}
}

// The question says what is missing, how long a build takes and what it
// needs, and where it builds.
func TestQuestion(t *testing.T) {
	got := build.MustLookup("kube").Question("/var/cache/ghostwatch")
	want := "The Kubernetes binaries are not built. Building them takes about 10 minutes (on 2 cores; ~1 GB of module cache and ~4 GB of build cache) " +
		"and needs the go command on PATH, bash, and network to the Go module proxy. Build now into /var/cache/ghostwatch? [y/N] "
	if got != want {
		t.Errorf("Question:\n%s\nwant\n%s", got, want)
	}
}

// need leaves a set found in the cache, or named by the variable, to the
// lab without building; an optional set that lacks is played without,
// unless --build or a yes builds it; a failed build is the error.
func TestNeed(t *testing.T) {
	cache := emptyCache(t)
	consul := build.MustLookup("consul")
	streams := func(stdin string) genericiooptions.IOStreams {
		return genericiooptions.IOStreams{In: strings.NewReader(stdin), Out: io.Discard, ErrOut: io.Discard}
	}
	ctx := context.Background()

	f := &fakeBuilder{dir: cache}
	if dir, err := f.builder().need(ctx, streams(""), consul, "", false, true); dir != "" || err != nil || len(f.built) > 0 {
		t.Errorf("optional, non-interactive: %q, %v, built %v", dir, err, f.built)
	}
	f = &fakeBuilder{tty: true, dir: cache}
	if dir, err := f.builder().need(ctx, streams("no\n"), consul, "", false, true); dir != "" || err != nil || len(f.built) > 0 {
		t.Errorf("optional, no: %q, %v, built %v", dir, err, f.built)
	}
	if dir, err := f.builder().need(ctx, streams("YES\n"), consul, "", false, true); dir != cache+"/consul" || err != nil || len(f.built) != 1 {
		t.Errorf("optional, yes: %q, %v, built %v", dir, err, f.built)
	}
	f = &fakeBuilder{dir: cache, err: errors.New("building the consul binary: exit status 1")}
	if _, err := f.builder().need(ctx, streams(""), consul, "", true, true); err == nil || err.Error() != "building the consul binary: exit status 1" {
		t.Errorf("failed build: %v", err)
	}

	// In the cache, as the script leaves it: found, nothing built.
	built := filepath.Join(cache, "consul-v1.14.11-"+"go1.0")
	if err := os.MkdirAll(built, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(built, "consul"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	f = &fakeBuilder{dir: cache}
	if dir, err := f.builder().need(ctx, streams(""), consul, "", true, false); dir != built || err != nil || len(f.built) > 0 {
		t.Errorf("in the cache: %q, %v, built %v", dir, err, f.built)
	}
	t.Setenv(consul.Env, t.TempDir())
	if dir, err := f.builder().need(ctx, streams(""), consul, "", true, true); dir != "" || err != nil || len(f.built) > 0 {
		t.Errorf("optional, named by %s: %q, %v, built %v", consul.Env, dir, err, f.built)
	}
}
