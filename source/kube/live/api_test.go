package live

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/ghostwatch/ghostwatch/internal/kubetest"
	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/kube"
)

// cluster returns API objects for the fake client and the snapshot they
// must become.
func cluster() ([]runtime.Object, *snapshot.Kube) {
	pod := kubetest.FullPod()
	pod2 := kubetest.FullPod()
	pod2.Name, pod2.Namespace, pod2.UID = "api-0", "a-first", "u0"
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "api", Annotations: map[string]string{"big": "x"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIPs: []string{"10.96.0.80"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, NodePort: 30080}}},
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "web", Name: "api-x", Labels: map[string]string{discoveryv1.LabelServiceName: "api"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.1.5"}, NodeName: ptr.To("worker-1"),
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "web", Name: "api-1"}}},
	}
	orphan := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "web", Name: "manual"},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.9.9.9"}}},
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "worker-1"},
		Status: corev1.NodeStatus{
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.50.1"}},
			Images:    []corev1.ContainerImage{{Names: []string{"registry.k8s.io/pause:3.10"}, SizeBytes: 1}},
		},
	}
	want := &snapshot.Kube{
		Pods:      []snapshot.Pod{kube.Pod(pod2), kube.Pod(pod)},
		Services:  []snapshot.Service{kube.Service(svc)},
		Endpoints: kube.Endpoints(slice),
		Nodes:     []snapshot.Node{kube.Node(node)},
	}
	return []runtime.Object{pod, pod2, svc, slice, orphan, node}, want
}

func TestInformersFake(t *testing.T) {
	objs, want := cluster()
	inf := NewInformers(fake.NewClientset(objs...), InformerOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), poll.Patience)
	defer cancel()
	if inf.HasSynced() {
		t.Errorf("HasSynced before Start")
	}
	inf.Start(ctx)
	inf.Start(ctx) // a second call does nothing
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if !inf.HasSynced() {
		t.Errorf("HasSynced false after WaitForSync")
	}
	if got := inf.Snapshot(); !reflect.DeepEqual(got, want) {
		t.Errorf("Snapshot:\n got %+v\nwant %+v", got, want)
	}
	// The caches hold trimmed objects.
	pods := inf.watched[0].Store().List()
	if len(pods) != 2 {
		t.Fatalf("pod cache holds %d pods", len(pods))
	}
	for _, obj := range pods {
		p := obj.(*corev1.Pod)
		if len(p.Spec.Containers) != 0 || len(p.Spec.Volumes) != 0 || p.Labels != nil || p.ManagedFields != nil || len(p.Status.ContainerStatuses) != 0 {
			t.Errorf("pod %s was not trimmed: %+v", p.Name, p)
		}
		if p.Status.PodIP == "" || p.Spec.NodeName == "" || p.DeletionTimestamp == nil {
			t.Errorf("pod %s lost what the snapshot needs: %+v", p.Name, p)
		}
	}
	for _, obj := range inf.watched[3].Store().List() {
		if n := obj.(*corev1.Node); len(n.Status.Images) != 0 || len(n.Status.Addresses) != 1 {
			t.Errorf("node not trimmed to its addresses: %+v", n)
		}
	}
	for _, obj := range inf.watched[1].Store().List() {
		if s := obj.(*corev1.Service); s.Annotations != nil {
			t.Errorf("service kept its annotations: %+v", s)
		}
	}
	// Only the slices of a Service are watched.
	if n := len(inf.watched[2].Store().List()); n != 1 {
		t.Errorf("slice cache holds %d slices, want 1", n)
	}
}

func TestWaitForSyncNotStarted(t *testing.T) {
	inf := NewInformers(fake.NewClientset(), InformerOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := inf.WaitForSync(ctx); err == nil || err.Error() != "the informers were not started" {
		t.Errorf("WaitForSync before Start: %v", err)
	}
}

func TestAPISourceFake(t *testing.T) {
	objs, want := cluster()
	src := &APISource{Client: fake.NewClientset(objs...), Timeout: 30 * time.Second}
	if src.Name() != "kube" {
		t.Errorf("Name() = %q", src.Name())
	}
	s := &snapshot.Snapshot{}
	if err := src.Collect(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s.Kube, want) {
		t.Errorf("Kube:\n got %+v\nwant %+v", s.Kube, want)
	}
}

func TestAPISourceSharedInformers(t *testing.T) {
	objs, want := cluster()
	inf := NewInformers(fake.NewClientset(objs...), InformerOptions{Resync: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inf.Start(ctx)
	s := &snapshot.Snapshot{}
	if err := (&APISource{Informers: inf, Timeout: 30 * time.Second}).Collect(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s.Kube, want) {
		t.Errorf("Kube:\n got %+v\nwant %+v", s.Kube, want)
	}
	if err := (&APISource{}).Collect(ctx, s); err == nil {
		t.Errorf("Collect without a client or informers succeeded")
	}
}

// startTLS starts a TLS test server for h and returns it with the path of
// a file holding its certificate, to trust it as a kubeconfig would.
func startTLS(t *testing.T, h http.Handler) (*httptest.Server, string) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // handshakes the test makes fail
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.crt")
	pemCert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(ca, pemCert, 0o600); err != nil {
		t.Fatal(err)
	}
	return srv, ca
}

// flagsFor returns kubectl-style flags that point at server, with an empty
// kubeconfig so that the test does not read the user's.
func flagsFor(t *testing.T, server string) *genericclioptions.ConfigFlags {
	t.Helper()
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	f := genericclioptions.NewConfigFlags(false)
	token := "s3cret"
	f.KubeConfig, f.APIServer, f.BearerToken = &kc, &server, &token
	return f
}

func clientFor(t *testing.T, server string, caFile string) *APISource {
	t.Helper()
	f := flagsFor(t, server)
	if caFile != "" {
		f.CAFile = &caFile
	}
	client, url, err := kube.ClientFromFlags(f)
	if err != nil {
		t.Fatal(err)
	}
	if url != server {
		t.Errorf("ClientFromFlags returned server %q, want %q", url, server)
	}
	return &APISource{Client: client}
}

// collect runs Collect and checks that it failed without setting Kube and
// that its error names the server.
func collect(t *testing.T, src *APISource, server string) (string, time.Duration) {
	t.Helper()
	s := &snapshot.Snapshot{}
	start := time.Now()
	err := src.Collect(context.Background(), s)
	took := time.Since(start)
	if err == nil {
		t.Fatalf("Collect succeeded: %+v", s.Kube)
	}
	if s.Kube != nil {
		t.Errorf("Collect failed but set Kube: %+v", s.Kube)
	}
	if !strings.HasPrefix(err.Error(), "API server "+server) {
		t.Errorf("error does not start with the server's URL %s: %v", server, err)
	}
	return err.Error(), took
}

func TestAPISourceUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := "https://" + l.Addr().String()
	l.Close() // nothing listens there now
	src := clientFor(t, server, "")
	src.Timeout = poll.Patience
	msg, took := collect(t, src, server)
	t.Log(msg)
	if !strings.Contains(msg, "is not reachable: ") || !strings.Contains(msg, "connection refused") {
		t.Errorf("error does not say connection refused: %s", msg)
	}
	if took >= src.Timeout {
		t.Errorf("Collect took %v, its whole timeout, for a refused connection", took)
	}
}

func TestAPISourceUntrustedCertificate(t *testing.T) {
	srv, _ := startTLS(t, newFakeAPI(t, nil).handler())
	src := clientFor(t, srv.URL, "")
	src.Timeout = 10 * time.Second
	msg, _ := collect(t, src, srv.URL)
	t.Log(msg)
	if !strings.Contains(msg, "failed TLS verification: ") || !strings.Contains(msg, "x509: certificate signed by unknown authority") {
		t.Errorf("error does not explain the certificate: %s", msg)
	}
}

func TestAPISourceWrongScheme(t *testing.T) {
	srv := httptest.NewServer(newFakeAPI(t, nil).handler())
	defer srv.Close()
	server := strings.Replace(srv.URL, "http:", "https:", 1)
	src := clientFor(t, server, "")
	src.Timeout = 10 * time.Second
	msg, _ := collect(t, src, server)
	t.Log(msg)
	if !strings.Contains(msg, "does not speak TLS") {
		t.Errorf("error does not say the server speaks no TLS: %s", msg)
	}
}

// fakeAPI answers like an API server: /version, and lists and watches of
// the four resources. Handlers in answer replace the default empty list
// for a path ("/version", "/api/v1/pods", ...).
type fakeAPI struct {
	t      *testing.T
	answer map[string]http.HandlerFunc
	mu     sync.Mutex
	auth   map[string]bool // Authorization headers seen
}

func newFakeAPI(t *testing.T, answer map[string]http.HandlerFunc) *fakeAPI {
	return &fakeAPI{t: t, answer: answer, auth: map[string]bool{}}
}

var listKinds = map[string]string{
	"/api/v1/pods":     "PodList",
	"/api/v1/services": "ServiceList",
	"/api/v1/nodes":    "NodeList",
	"/apis/discovery.k8s.io/v1/endpointslices": "EndpointSliceList",
}

func (f *fakeAPI) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.auth[r.Header.Get("Authorization")] = true
		f.mu.Unlock()
		if h := f.answer[r.URL.Path]; h != nil {
			h(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/version" {
			fmt.Fprint(w, `{"major":"1","minor":"34","gitVersion":"v1.34.2"}`)
			return
		}
		kind, ok := listKinds[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		if r.URL.Query().Get("watch") != "" {
			// An idle watch, open until the client goes.
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		apiVersion := "v1"
		if strings.HasPrefix(r.URL.Path, "/apis/") {
			apiVersion = "discovery.k8s.io/v1"
		}
		fmt.Fprintf(w, `{"kind":%q,"apiVersion":%q,"metadata":{"resourceVersion":"7"},"items":[]}`, kind, apiVersion)
	})
}

func status(code int, reason, message string, details string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":%q,"reason":%q,"details":%s,"code":%d}`,
			message, reason, details, code)
	}
}

var unauthorized = status(401, "Unauthorized", "Unauthorized", "{}")

func forbidden(resource, group string) http.HandlerFunc {
	qualified := resource
	if group != "" {
		qualified += "." + group
	}
	return status(403, "Forbidden",
		fmt.Sprintf(`%s is forbidden: User "system:serviceaccount:ghostwatch:scanner" cannot list resource %q in API group %q at the cluster scope`, qualified, resource, group),
		fmt.Sprintf(`{"kind":%q,"group":%q}`, resource, group))
}

// hang answers nothing until the client gives up.
func hang(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }

func TestAPISourceHTTPErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answer  map[string]http.HandlerFunc
		timeout time.Duration
		want    []string // substrings of the error
		wantNot []string
		fast    bool // must fail at once, not wait its timeout (the suite's patience) out
	}{{
		name:    "credentials rejected",
		answer:  map[string]http.HandlerFunc{"/version": unauthorized},
		timeout: poll.Patience,
		want:    []string{" rejected the credentials: Unauthorized (401)"},
		fast:    true,
	}, {
		name: "lists unauthorized",
		answer: map[string]http.HandlerFunc{
			"/api/v1/pods": unauthorized, "/api/v1/services": unauthorized, "/api/v1/nodes": unauthorized,
			"/apis/discovery.k8s.io/v1/endpointslices": unauthorized,
		},
		timeout: poll.Patience,
		want:    []string{": could not list ", "Unauthorized (401): the API server rejected the credentials"},
		fast:    true,
	}, {
		name:    "pods forbidden",
		answer:  map[string]http.HandlerFunc{"/api/v1/pods": forbidden("pods", "")},
		timeout: poll.Patience,
		want: []string{`: could not list pods: pods is forbidden: User "system:serviceaccount:ghostwatch:scanner" cannot list resource "pods" in API group "" at the cluster scope (403 Forbidden): ` +
			`missing permission to list and watch pods in all namespaces (a ClusterRole rule with verbs list, watch)`},
		wantNot: []string{"services", "nodes"},
		fast:    true,
	}, {
		name:    "endpointslices forbidden",
		answer:  map[string]http.HandlerFunc{"/apis/discovery.k8s.io/v1/endpointslices": forbidden("endpointslices", "discovery.k8s.io")},
		timeout: poll.Patience,
		want:    []string{`: could not list endpointslices: endpointslices.discovery.k8s.io is forbidden`, "list and watch endpointslices (API group discovery.k8s.io) in all namespaces"},
		fast:    true,
	}, {
		name:    "endpointslices not served",
		answer:  map[string]http.HandlerFunc{"/apis/discovery.k8s.io/v1/endpointslices": http.NotFound},
		timeout: poll.Patience,
		want:    []string{": could not list endpointslices: the API server does not serve endpointslices (API group discovery.k8s.io) (404 Not Found)"},
		fast:    true,
	}, {
		name:    "nodes failing",
		answer:  map[string]http.HandlerFunc{"/api/v1/nodes": status(500, "InternalError", "etcdserver: request timed out", "{}")},
		timeout: time.Second,
		want:    []string{": could not list/watch nodes within 1s: etcdserver: request timed out (500 InternalError)"},
		wantNot: []string{"pods"},
	}, {
		name:    "pods never answered",
		answer:  map[string]http.HandlerFunc{"/api/v1/pods": hang},
		timeout: time.Second,
		want:    []string{": could not list/watch pods within 1s: no answer from the API server"},
	}, {
		name:    "version never answered",
		answer:  map[string]http.HandlerFunc{"/version": hang},
		timeout: time.Second,
		want:    []string{" did not answer within 1s"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			api := newFakeAPI(t, tc.answer)
			srv, ca := startTLS(t, api.handler())
			src := clientFor(t, srv.URL, ca)
			src.Timeout = tc.timeout
			msg, took := collect(t, src, srv.URL)
			t.Log(msg)
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error lacks %q", w)
				}
			}
			for _, w := range tc.wantNot {
				if strings.Contains(strings.TrimPrefix(msg, "API server "+srv.URL), w) {
					t.Errorf("error mentions %q", w)
				}
			}
			if tc.fast && took >= tc.timeout {
				t.Errorf("Collect waited out its %v timeout (%v) for a failure waiting cannot mend", tc.timeout, took)
			}
			api.mu.Lock()
			defer api.mu.Unlock()
			if !api.auth["Bearer s3cret"] || len(api.auth) != 1 {
				t.Errorf("requests carried %v, want only the --token", api.auth)
			}
		})
	}
}

func TestSyncErrorUnwraps(t *testing.T) {
	inner := errors.New("boom")
	e := &SyncError{Resources: []string{"pods", "nodes"}, Errs: []error{inner, nil}, Waited: 1500 * time.Millisecond, Err: context.DeadlineExceeded}
	if !errors.Is(e, context.DeadlineExceeded) || !errors.Is(e, inner) {
		t.Errorf("SyncError hides its causes")
	}
	const want = "could not list/watch pods within 1.5s: boom; could not list/watch nodes within 1.5s: no answer from the API server"
	if e.Error() != want {
		t.Errorf("Error() = %q, want %q", e.Error(), want)
	}
	e.Err = context.Canceled
	if got := e.Error(); !strings.HasPrefix(got, "stopped (context canceled) before pods were listed: boom") {
		t.Errorf("Error() = %q", got)
	}
}
