package cli

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ghostwatch/ghostwatch/controller"
	"github.com/ghostwatch/ghostwatch/deploy"
	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/source/gossip"
)

// The Deployment ships args the controller accepts.
func TestDeployedControllerArgsAreValid(t *testing.T) {
	d, err := deploy.ControllerDeployment()
	if err != nil {
		t.Fatal(err)
	}
	args := d.Spec.Template.Spec.Containers[0].Args
	var out, errOut bytes.Buffer
	cmd := newControllerCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	if args[0] != cmd.Name() {
		t.Fatalf("args %v: want the %s command first", args, cmd.Name())
	}
	if err := cmd.ParseFlags(args[1:]); err != nil {
		t.Fatalf("deploy/controller/deployment.yaml args %v: %v", args, err)
	}
}

// Without an API server at start it stays up, not ready: /readyz answers
// 503 with the server and the error, and it tries again; it stops cleanly
// when told to. (It used to exit 2, into a crash loop.)
func TestControllerWithoutAnAPIServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut bytes.Buffer
	streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}
	done := make(chan int, 1)
	go func() {
		done <- Execute(ctx, NewRootCommand(streams), []string{"controller", "--server=https://127.0.0.1:1", "--listen=" + addr, "--history-listen=",
			"--lease-namespace=x", "--identity=me", "--request-timeout=2s", "--log-format=text"}, streams)
	}()
	var body string
	poll.Until(t, poll.Patience, "/readyz to say the API server cannot be reached", func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(body, "the API server cannot be reached") && strings.Contains(body, "127.0.0.1:1")
	})
	select {
	case code := <-done:
		t.Fatalf("the controller exited (%d) while the API server was unreachable", code)
	default:
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d after being told to stop", code)
		}
	case <-time.After(poll.Patience):
		t.Fatalf("the controller did not stop within %v", poll.Patience)
	}
}

// The help says what the controller watches and runs: every resource it
// lists and watches, every cluster rule and what it reads.
func TestControllerHelpListsWhatItRuns(t *testing.T) {
	code, out, _ := run(t, "", "controller", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	flat := strings.Join(strings.Fields(out), " ")
	for _, gr := range ControllerWatched() {
		if !strings.Contains(flat, gr.String()) {
			t.Errorf("the help does not name %s", gr)
		}
	}
	runs, others := ControllerRules(rule.All(rule.Config{}))
	for _, r := range runs {
		if !strings.Contains(out, "  "+r.Info().ID+" (reads ") {
			t.Errorf("the help does not list %s with what it reads", r.Info().ID)
		}
	}
	for _, r := range others {
		if !strings.Contains(flat, r.Info().ID+" (needs ") || strings.Contains(out, "  "+r.Info().ID+" (reads ") {
			t.Errorf("the help lists %s among what the controller runs, or not at all", r.Info().ID)
		}
	}
	if !strings.Contains(out, "ipam-unbooked-ip (reads kube, calico; the agents judge hostlocal)") {
		t.Errorf("the help does not say which ledger ipam-unbooked-ip judges here:\n%s", out)
	}
}

// The remedy flags are checked before anything is reached.
func TestControllerRemedyFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--remedy=hostlocal-reserve"}, `--remedy "hostlocal-reserve": the controller's remedies are gossip-force-leave`},
		{[]string{"--dry-run"}, "--dry-run needs --remedy"},
		{[]string{"--remedy=gossip-force-leave", "--grace=10s"}, "--grace 10s: must be at least --gossip-interval (30s)"},
		{[]string{"--remedy=gossip-force-leave", "--budget=0"}, "--budget 0: must be at least 1"},
		{[]string{"--gossip-interval=10ms", "--grace=1m"}, "--gossip-interval 10ms: must be at least 1s"},
		{[]string{"--history-ended=0"}, "--history-ended 0: must be at least 1"},
	} {
		code, _, errOut := run(t, "", append([]string{"controller", "--server=https://127.0.0.1:1", "--listen="}, tc.args...)...)
		if code != ExitError || !strings.Contains(errOut, tc.want) || strings.Contains(errOut, "127.0.0.1:1") {
			t.Errorf("%v: exit %d, stderr %q; want %q before reaching the API server", tc.args, code, errOut, tc.want)
		}
	}
}

// The controller runs the cluster rules whose sources it reads, Calico's
// and the gossip clusters' included, and leaves those that need another
// source to scan.
func TestControllerRulesAreThoseOfWhatItReads(t *testing.T) {
	all := rule.All(rule.Config{})
	runs, others := ControllerRules(all)
	want := []string{rule.DuplicatePodIPID, rule.IPAMUnbookedIPID, rule.IPAMLeakedIPID, rule.IPAMMisbookedID, "ipam-ledger-corrupt",
		rule.GossipGhostMemberID, rule.GossipIPIdentityID}
	if got := rule.IDs(runs); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Errorf("runs %v, want %v", got, want)
	}
	if len(runs)+len(others) != len(rule.InScope(all, rule.ScopeCluster)) {
		t.Errorf("runs %v and others %v are not the cluster rules", rule.IDs(runs), rule.IDs(others))
	}
	for _, r := range others {
		info := r.Info()
		if !slices.ContainsFunc(info.Sources, func(s string) bool { return !slices.Contains(controllerSourceNames, s) }) {
			t.Errorf("%s reads %v, all of which the controller reads, and does not run", info.ID, info.Sources)
		}
	}
	sources, _ := controllerSources(fake.NewClientset(), nil, nil, time.Minute, nil, nil)
	var names []string
	for _, s := range sources {
		names = append(names, s.Name())
	}
	if !slices.Equal(names, controllerSourceNames) {
		t.Errorf("the controller's sources are %v, named %v", names, controllerSourceNames)
	}
	// The controller's gossip series follow the gossip source by name.
	if controller.GossipSource != gossip.Name {
		t.Errorf("controller.GossipSource = %q, the gossip source is %q", controller.GossipSource, gossip.Name)
	}
}
