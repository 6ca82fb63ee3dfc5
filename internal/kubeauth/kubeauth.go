package kubeauth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
)

// Audience is the audience a token must be bound to for an agent to take
// it: `ghostwatch ip` requests one (a ServiceAccount token with
// --audience ghostwatch-agent), never sends its own credential.
const Audience = "ghostwatch-agent"

// Group, Resource and the subresources are the attributes a caller must be
// allowed to get, with the node's name, in a SubjectAccessReview: RBAC
// grants them as apiGroups [ghostwatch.io], resources [nodes/flows, ...],
// optionally restricted to some nodes by resourceNames.
const (
	Group     = "ghostwatch.io"
	Resource  = "nodes"
	Flows     = "flows"
	HostLocal = "hostlocal"
	Findings  = "findings"
)

// Defaults of Guard.
const (
	// DefaultMaxInFlight bounds the guarded requests answered at once: a
	// flow lookup reads the whole conntrack table, and two at once is
	// what one caller (`ghostwatch ip` asks an agent its three questions
	// one after the other) and an operator beside it need.
	DefaultMaxInFlight = 2
	// DefaultTimeout bounds one guarded request, reviews included.
	DefaultTimeout = 30 * time.Second
	// DefaultAllowTTL and DefaultDenyTTL are how long a review's answer
	// stands: a token or a binding revoked takes effect within a minute,
	// and a caller refused asks the API server again soon.
	DefaultAllowTTL = time.Minute
	DefaultDenyTTL  = 10 * time.Second
	// DefaultCacheSize bounds the answers kept, each cache.
	DefaultCacheSize = 256
)

// Reviews are the API resources a Guard creates, for the RBAC of whoever
// runs it: create on each.
func Reviews() []schema.GroupResource {
	return []schema.GroupResource{
		{Group: authenticationv1.GroupName, Resource: "tokenreviews"},
		{Group: authorizationv1.GroupName, Resource: "subjectaccessreviews"},
	}
}

// Guard admits requests of callers the cluster authorizes. Zero fields
// take the defaults above.
type Guard struct {
	// Client creates the reviews.
	Client kubernetes.Interface
	// Node is the node whose subresources are authorized.
	Node string
	// Audiences a token must be bound to; [Audience] when empty.
	Audiences []string
	// MaxInFlight bounds the requests answered at once; beyond, 429.
	MaxInFlight int
	// Timeout bounds one request.
	Timeout time.Duration
	// AllowTTL and DenyTTL are how long a review's answer stands.
	AllowTTL, DenyTTL time.Duration
	// CacheSize bounds each cache.
	CacheSize int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Log, when set, is told of every request refused for want of
	// authorization (never the token).
	Log *slog.Logger

	once   sync.Once
	slots  chan struct{}
	tokens *cache[*authenticationv1.UserInfo]
	access *cache[string]
}

func (g *Guard) init() {
	g.once.Do(func() {
		if g.MaxInFlight <= 0 {
			g.MaxInFlight = DefaultMaxInFlight
		}
		if g.Timeout <= 0 {
			g.Timeout = DefaultTimeout
		}
		if g.AllowTTL <= 0 {
			g.AllowTTL = DefaultAllowTTL
		}
		if g.DenyTTL <= 0 {
			g.DenyTTL = DefaultDenyTTL
		}
		if g.CacheSize <= 0 {
			g.CacheSize = DefaultCacheSize
		}
		if len(g.Audiences) == 0 {
			g.Audiences = []string{Audience}
		}
		if g.Now == nil {
			g.Now = time.Now
		}
		if g.Log == nil {
			g.Log = slog.New(slog.DiscardHandler)
		}
		g.slots = make(chan struct{}, g.MaxInFlight)
		g.tokens = newCache[*authenticationv1.UserInfo](g.CacheSize)
		g.access = newCache[string](g.CacheSize)
	})
}

// Protect returns h answering only callers allowed to get subresource of
// the node: 401 without a token bound to the audience, 403 when the
// cluster does not allow its identity, 429 beyond MaxInFlight, 503 when
// the API server cannot answer the reviews. h runs with the request's
// context bounded by Timeout.
func (g *Guard) Protect(subresource string, h http.Handler) http.Handler {
	g.init()
	attrs := fmt.Sprintf("get %s/%s (%s) of node %s", Resource, subresource, Group, g.Node)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearer(r)
		if !ok {
			// No review for a request with no token: it costs the API
			// server nothing.
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+Audience+`"`)
			http.Error(w, fmt.Sprintf("no bearer token: this agent answers only a caller the cluster allows to %s, with a token bound to audience %s (ghostwatch ip requests one)", attrs, strings.Join(g.Audiences, ", ")), http.StatusUnauthorized)
			return
		}
		select {
		case g.slots <- struct{}{}:
			defer func() { <-g.slots }()
		default:
			w.Header().Set("Retry-After", "1")
			http.Error(w, fmt.Sprintf("busy: this agent answers at most %d such requests at once; retry", g.MaxInFlight), http.StatusTooManyRequests)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), g.Timeout)
		defer cancel()
		user, err := g.authenticate(ctx, token)
		var denied *deniedError
		switch {
		case errors.As(err, &denied):
			g.Log.Info("request refused: token not valid", "path", r.URL.Path, "remote", r.RemoteAddr, "reason", denied.reason)
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+Audience+`"`)
			http.Error(w, fmt.Sprintf("the token is not valid for audience %s: %s", strings.Join(g.Audiences, ", "), denied.reason), http.StatusUnauthorized)
			return
		case err != nil:
			http.Error(w, "the token cannot be checked: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		if err := g.authorize(ctx, user, subresource); errors.As(err, &denied) {
			g.Log.Info("request refused: not authorized", "path", r.URL.Path, "remote", r.RemoteAddr, "user", user.Username, "reason", denied.reason)
			http.Error(w, fmt.Sprintf("%s may not %s: %s", user.Username, attrs, denied.reason), http.StatusForbidden)
			return
		} else if err != nil {
			http.Error(w, "the caller's access cannot be checked: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// bearer returns the request's bearer token.
func bearer(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// deniedError is a review's refusal, as opposed to a review that failed.
type deniedError struct{ reason string }

func (e *deniedError) Error() string { return e.reason }

// authenticate returns who token names, from the cache or a TokenReview.
func (g *Guard) authenticate(ctx context.Context, token string) (*authenticationv1.UserInfo, error) {
	sum := sha256.Sum256([]byte(token))
	key := hex.EncodeToString(sum[:])
	if u, denial, ok := g.tokens.get(key, g.Now()); ok {
		if u == nil {
			return nil, &deniedError{denial}
		}
		return u, nil
	}
	tr, err := g.Client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: g.Audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("TokenReview: %w", err)
	}
	st := tr.Status
	if !st.Authenticated || !audienceOf(st.Audiences, g.Audiences) {
		reason := st.Error
		if reason == "" {
			reason = "not authenticated"
		}
		g.tokens.put(key, nil, reason, g.Now().Add(g.DenyTTL))
		return nil, &deniedError{reason}
	}
	u := st.User
	g.tokens.put(key, &u, "", g.Now().Add(g.AllowTTL))
	return &u, nil
}

// audienceOf reports whether the audiences a review found the token bound
// to include one asked for. A review that names none bound it to those
// asked (an API server before audiences says nothing).
func audienceOf(got, want []string) bool {
	if len(got) == 0 {
		return true
	}
	for _, a := range got {
		if slices.Contains(want, a) {
			return true
		}
	}
	return false
}

// authorize returns nil when user may get subresource of the node, from
// the cache or a SubjectAccessReview.
func (g *Guard) authorize(ctx context.Context, user *authenticationv1.UserInfo, subresource string) error {
	groups := slices.Clone(user.Groups)
	slices.Sort(groups)
	key := strings.Join([]string{user.Username, user.UID, strings.Join(groups, ","), fmt.Sprint(user.Extra), subresource}, "\x00")
	if _, denial, ok := g.access.get(key, g.Now()); ok {
		if denial != "" {
			return &deniedError{denial}
		}
		return nil
	}
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar, err := g.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: "get", Group: Group, Resource: Resource, Subresource: subresource, Name: g.Node,
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("SubjectAccessReview: %w", err)
	}
	if !sar.Status.Allowed || sar.Status.Denied {
		reason := strings.TrimSpace(sar.Status.Reason + " " + sar.Status.EvaluationError)
		if reason == "" {
			// The cache tells a denial by its reason: never empty.
			reason = "no rule allows it"
		}
		g.access.put(key, "", reason, g.Now().Add(g.DenyTTL))
		return &deniedError{reason}
	}
	g.access.put(key, "allowed", "", g.Now().Add(g.AllowTTL))
	return nil
}

// cache keeps at most size answers, each until it expires; when full, the
// entry that expires first makes room.
type cache[T any] struct {
	mu      sync.Mutex
	size    int
	entries map[string]entry[T]
}

type entry[T any] struct {
	v       T
	denial  string
	expires time.Time
}

func newCache[T any](size int) *cache[T] {
	return &cache[T]{size: size, entries: map[string]entry[T]{}}
}

// get returns the answer under key and whether one stands at now.
func (c *cache[T]) get(key string, now time.Time) (T, string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || !now.Before(e.expires) {
		delete(c.entries, key)
		var zero T
		return zero, "", false
	}
	return e.v, e.denial, true
}

func (c *cache[T]) put(key string, v T, denial string, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[key]; !ok && len(c.entries) >= c.size {
		first := ""
		for k, e := range c.entries {
			if first == "" || e.expires.Before(c.entries[first].expires) {
				first = k
			}
		}
		delete(c.entries, first)
	}
	c.entries[key] = entry[T]{v, denial, expires}
}

// len is how many answers the cache holds.
func (c *cache[T]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
