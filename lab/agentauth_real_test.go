package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/ghostwatch/ghostwatch/deploy"
	"github.com/ghostwatch/ghostwatch/deploy/chart"
	"github.com/ghostwatch/ghostwatch/internal/kubeauth"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
	"github.com/ghostwatch/ghostwatch/sink"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
	"github.com/ghostwatch/ghostwatch/source/hostlocal"
)

// installIPReader applies the chart's ipReader, bound to user alice: the
// ServiceAccount ghostwatch-ip-reader the agents answer, and what ip needs.
func installIPReader(t *testing.T, e *realEnv) {
	t.Helper()
	objs, err := chart.Render("ghostwatch", "ghostwatch", `
agent: {enabled: false}
controller: {enabled: false}
ipReader:
  enabled: true
  subjects: [{kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}]
`)
	if err != nil {
		t.Fatal(err)
	}
	applyObjects(t, e, objs)
}

// oneFlow is a conntrack table holding one flow translated to 10.244.1.5.
type oneFlow struct{}

func (oneFlow) Dump(_ context.Context, fn func(*snapshot.Flow) error) (int, error) {
	f := snapshot.Flow{Proto: snapshot.ProtoTCP,
		Orig:  snapshot.Tuple{Src: netip.MustParseAddr("10.0.0.9"), Dst: netip.MustParseAddr("10.96.0.10"), SrcPort: 41000, DstPort: 80},
		Reply: snapshot.Tuple{Src: netip.MustParseAddr("10.244.1.5"), Dst: netip.MustParseAddr("10.0.0.9"), SrcPort: 8080, DstPort: 41000}}
	return 1, fn(&f)
}
func (oneFlow) Get(*snapshot.Flow) (snapshot.Flow, error) { return snapshot.Flow{}, nil }
func (oneFlow) Delete(*snapshot.Flow) error               { return nil }

// What an agent serves of its node, on the real API server, with the
// agent's own ServiceAccount as its manifest binds it: a request with no
// token, with a token of the API server's audience (a caller's own
// credential), or with one of an identity not allowed, gets no flow; a
// token of the chart's reader, bound to the agents' audience, gets it.
// `ghostwatch ip`, run as a user the chart's ipReader binds, requests such
// a token and is answered.
func TestRealAgentAnswersOnlyWhomTheClusterAllows(t *testing.T) {
	ctx, cp := startControlPlane(t, controlplane.Options{})
	e := &realEnv{cp: cp, api: cp.Admin}
	ms, err := deploy.AgentInstall()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if err := createObject(ctx, cp.Admin, m.Object); err != nil {
			t.Fatalf("%s: %v", m.File, err)
		}
	}
	installIPReader(t, e)
	if _, err := cp.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Admin.CoreV1().ServiceAccounts("shop").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "web"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := func(ns, sa string, audiences ...string) string {
		t.Helper()
		tr, err := cp.Admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			Audiences: audiences, ExpirationSeconds: ptr.To(int64(600))}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}

	// The agent's guard, with the agent's client, in front of node-1's
	// table.
	agentClient, err := kubernetes.NewForConfig(cp.Config(controlplane.UserAgent))
	if err != nil {
		t.Fatal(err)
	}
	guard := &kubeauth.Guard{Client: agentClient, Node: "node-1"}
	mux := http.NewServeMux()
	mux.Handle(conntrack.AddressPath, guard.Protect(kubeauth.Flows, conntrack.AddressHandler("node-1", func() (conntrack.Table, func(), error) {
		return oneFlow{}, func() {}, nil
	}, time.Now)))
	mux.Handle(hostlocal.AddressPath, guard.Protect(kubeauth.HostLocal, hostlocal.AddressHandler("node-1", t.TempDir())))
	mux.Handle(sink.FindingsPath, guard.Protect(kubeauth.Findings, sink.FindingsHandler(func(ip netip.Addr) sink.FindingsAt {
		return sink.NewFindingsAt("node-1", true, nil, nil, ip)
	})))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	for _, c := range []struct {
		name, token string
		code        int
		want        string
	}{
		{"no token", "", http.StatusUnauthorized, "no bearer token"},
		{"the reader's token for the API server", token("ghostwatch", "ghostwatch-ip-reader"), http.StatusUnauthorized, "the token is not valid for audience ghostwatch-agent"},
		{"an identity not allowed", token("shop", "web", kubeauth.Audience), http.StatusForbidden,
			"system:serviceaccount:shop:web may not get nodes/flows (ghostwatch.io) of node node-1"},
		{"the agent's own static token", cp.Config(controlplane.UserAgent).BearerToken, http.StatusUnauthorized, "the token is not valid for audience ghostwatch-agent"},
		{"the reader's token for the agents", token("ghostwatch", "ghostwatch-ip-reader", kubeauth.Audience), http.StatusOK, `"flow":"tcp 10.0.0.9:41000`},
	} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+conntrack.AddressPath+"10.244.1.5", nil)
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code || !strings.Contains(string(b), c.want) {
			t.Errorf("%s: %d %q; want %d and %q", c.name, resp.StatusCode, b, c.code, c.want)
		}
		if resp.StatusCode != http.StatusOK && strings.Contains(string(b), "10.0.0.9") {
			t.Errorf("%s: refused, yet a flow was shown: %q", c.name, b)
		}
	}

	// ghostwatch ip, as alice: the chart lets her request the reader's
	// token, and the agent answers it.
	kubeconfig, err := cp.WriteKubeconfig(controlplane.UserAdmin)
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	cmd := exec.Command(ghostwatchBinary(t), "ip", "10.244.1.5", "--kubeconfig="+kubeconfig, "--as=alice", "-o", "json",
		"--history-url=http://127.0.0.1:1", "--flows-url="+srv.URL)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	_ = cmd.Run() // exit 2: no controller replica answers here
	var rep ipTimeline
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("ghostwatch ip -o json: %v\n%s\n%s", err, out.String(), errOut.String())
	}
	if len(rep.Flows) != 1 || len(rep.Flows[0].Flows) != 1 || rep.Flows[0].Node != "node-1" {
		t.Errorf("ghostwatch ip as alice: flows %+v, unanswered %+v; want node-1's flow", rep.Flows, rep.Unanswered)
	}
	for _, u := range rep.Unanswered {
		if strings.Contains(u.Error, "token") || strings.Contains(u.Error, "401") || strings.Contains(u.Error, "403") {
			t.Errorf("ghostwatch ip as alice: %s did not answer: %s", u.Replica, u.Error)
		}
	}
}
