package kubeauth

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ghostwatch/ghostwatch/internal/fakeclock"
)

// apiServer answers reviews as an API server would: tokens by value, the
// audience each is bound to, and who may get which subresource.
type apiServer struct {
	client *fake.Clientset
	// users are the tokens' users; audiences what each is bound to.
	users     map[string]string
	audiences map[string][]string
	// allowed are "user subresource" pairs RBAC allows.
	allowed  map[string]bool
	fail     atomic.Bool
	tokenRev atomic.Int32
	accessRv atomic.Int32
}

func newAPIServer() *apiServer {
	a := &apiServer{client: fake.NewClientset(),
		users:     map[string]string{"good": "system:serviceaccount:ghostwatch:ghostwatch-ip-reader", "stranger": "system:serviceaccount:shop:web"},
		audiences: map[string][]string{"good": {Audience}, "stranger": {Audience}, "apiserver": {"https://kubernetes.default.svc"}},
		allowed:   map[string]bool{"system:serviceaccount:ghostwatch:ghostwatch-ip-reader flows": true},
	}
	a.users["apiserver"] = "alice"
	a.client.PrependReactor("create", "tokenreviews", func(act k8stesting.Action) (bool, runtime.Object, error) {
		a.tokenRev.Add(1)
		if a.fail.Load() {
			return true, nil, fmt.Errorf("connection refused")
		}
		tr := act.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		out := tr.DeepCopy()
		user, ok := a.users[tr.Spec.Token]
		bound := false
		for _, got := range a.audiences[tr.Spec.Token] {
			for _, want := range tr.Spec.Audiences {
				bound = bound || got == want
			}
		}
		if !ok || !bound {
			out.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token, token audiences is invalid"}
			return true, out, nil
		}
		out.Status = authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: tr.Spec.Audiences,
			User: authenticationv1.UserInfo{Username: user, Groups: []string{"system:serviceaccounts"}}}
		return true, out, nil
	})
	a.client.PrependReactor("create", "subjectaccessreviews", func(act k8stesting.Action) (bool, runtime.Object, error) {
		a.accessRv.Add(1)
		sar := act.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		out := sar.DeepCopy()
		ra := sar.Spec.ResourceAttributes
		if ra.Group != Group || ra.Resource != Resource || ra.Name != "node-a" || ra.Verb != "get" {
			return true, nil, fmt.Errorf("unexpected attributes %+v", ra)
		}
		out.Status.Allowed = a.allowed[sar.Spec.User+" "+ra.Subresource]
		return true, out, nil
	})
	return a
}

// flowsServed counts the requests the guarded handler answered.
type flowsServed struct{ n atomic.Int32 }

func (f *flowsServed) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.n.Add(1)
	io.WriteString(w, `{"flows":[{"flow":"tcp 10.0.0.9:41000 -> 10.96.0.10:80"}]}`)
}

func get(t *testing.T, h http.Handler, token string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/v1/flows/10.244.1.5", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

// Only a token bound to the audience, of an identity RBAC allows to get
// the node's flows, gets them: no token, another's audience (a caller's
// own credential, good against the API server), an identity not allowed,
// and an API server that cannot answer get no flow, each with a status
// and a message that says why. Answers are cached: asking again costs the
// API server nothing.
func TestOnlyAuthorizedCallersGetFlows(t *testing.T) {
	api := newAPIServer()
	served := &flowsServed{}
	g := &Guard{Client: api.client, Node: "node-a"}
	h := g.Protect(Flows, served)
	for _, c := range []struct {
		token string
		code  int
		want  string
	}{
		{"", http.StatusUnauthorized, "no bearer token: this agent answers only a caller the cluster allows to get nodes/flows (ghostwatch.io) of node node-a, with a token bound to audience ghostwatch-agent"},
		{"apiserver", http.StatusUnauthorized, "the token is not valid for audience ghostwatch-agent: invalid bearer token, token audiences is invalid"},
		{"forged", http.StatusUnauthorized, "the token is not valid for audience ghostwatch-agent"},
		{"stranger", http.StatusForbidden, "system:serviceaccount:shop:web may not get nodes/flows (ghostwatch.io) of node node-a: no rule allows it"},
		{"good", http.StatusOK, `"flows":[`},
	} {
		for range 2 {
			code, body := get(t, h, c.token)
			if code != c.code || !strings.Contains(body, c.want) {
				t.Errorf("token %q: %d %q; want %d and %q", c.token, code, body, c.code, c.want)
			}
			if code != http.StatusOK && strings.Contains(body, "10.0.0.9") {
				t.Errorf("token %q: refused, yet a flow was shown: %q", c.token, body)
			}
		}
	}
	if n := served.n.Load(); n != 2 {
		t.Errorf("the flows were served %d times, want 2 (the good token's)", n)
	}
	// One TokenReview per token given, one SubjectAccessReview per
	// identity authenticated: the second ask of each came from the cache.
	if tr, sar := api.tokenRev.Load(), api.accessRv.Load(); tr != 4 || sar != 2 {
		t.Errorf("%d TokenReviews and %d SubjectAccessReviews, want 4 and 2", tr, sar)
	}
	// Another subresource is another question.
	if code, body := get(t, g.Protect(HostLocal, served), "good"); code != http.StatusForbidden || !strings.Contains(body, "may not get nodes/hostlocal") {
		t.Errorf("hostlocal, not granted: %d %q", code, body)
	}

	api.fail.Store(true)
	g2 := &Guard{Client: api.client, Node: "node-a"}
	if code, body := get(t, g2.Protect(Flows, served), "good"); code != http.StatusServiceUnavailable || !strings.Contains(body, "the token cannot be checked: TokenReview: connection refused") {
		t.Errorf("API server down: %d %q", code, body)
	}
}

// An answer stands for its TTL, a refusal for a shorter one; the caches
// hold at most CacheSize answers, whatever the number of tokens tried.
func TestReviewsExpireAndCachesAreBounded(t *testing.T) {
	api := newAPIServer()
	clock := fakeclock.New(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
	g := &Guard{Client: api.client, Node: "node-a", Now: clock.Now, CacheSize: 4}
	h := g.Protect(Flows, &flowsServed{})
	get(t, h, "good")
	get(t, h, "forged")
	clock.Advance(DefaultDenyTTL)
	get(t, h, "good")
	get(t, h, "forged")
	if n := api.tokenRev.Load(); n != 3 {
		t.Errorf("%d TokenReviews after the refusal expired, want 3 (good once, forged twice)", n)
	}
	clock.Advance(DefaultAllowTTL)
	get(t, h, "good")
	if n := api.tokenRev.Load(); n != 4 {
		t.Errorf("%d TokenReviews after the answer expired, want 4", n)
	}
	for i := range 50 {
		get(t, h, fmt.Sprintf("guess-%d", i))
	}
	if n := g.tokens.len(); n > 4 {
		t.Errorf("the token cache holds %d answers, more than its bound 4", n)
	}
}

// At most MaxInFlight requests are answered at once; the next is refused
// with 429 at once, not queued, and is answered once one ends.
func TestAtMostMaxInFlightAtOnce(t *testing.T) {
	api := newAPIServer()
	release := make(chan struct{})
	entered := make(chan struct{}, DefaultMaxInFlight+1)
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		io.WriteString(w, "ok")
	})
	h := (&Guard{Client: api.client, Node: "node-a"}).Protect(Flows, slow)
	done := make(chan int, DefaultMaxInFlight)
	for range DefaultMaxInFlight {
		go func() { code, _ := get(t, h, "good"); done <- code }()
	}
	for range DefaultMaxInFlight {
		<-entered
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/v1/flows/10.244.1.5", nil)
	req.Header.Set("Authorization", "Bearer good")
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), "at most 2 such requests at once") {
		t.Errorf("beyond the bound: %d %q %v", rec.Code, rec.Body.String(), rec.Header())
	}
	close(release)
	for range DefaultMaxInFlight {
		if code := <-done; code != http.StatusOK {
			t.Errorf("a request within the bound: %d", code)
		}
	}
	if code, _ := get(t, h, "good"); code != http.StatusOK {
		t.Errorf("after the others ended: %d", code)
	}
}
