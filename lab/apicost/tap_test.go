package apicost

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

type hostListener struct{}

func (hostListener) Listen(network, addr string) (net.Listener, error) {
	return net.Listen(network, addr)
}

// fakeAPIServer answers a list of pods (3 items, gzipped when the client
// accepts it, as the API server does with large answers) and a watch of
// pods (two ADDED, the bookmark ending the initial events, MODIFIED,
// DELETED, then nothing until the client leaves), over HTTP/2 and TLS. It
// records the protocol of each request.
type fakeAPIServer struct {
	*httptest.Server
	mu     sync.Mutex
	protos []string
}

func newFakeAPIServer(t *testing.T) *fakeAPIServer {
	pb := newEncoding(t, protobufType)
	list := &corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}}
	for i := range 3 {
		list.Items = append(list.Items, *testPod(i))
	}
	listBody := pb.encode(t, list)
	stream := pb.watchStream(t, watchEvent{watch.Added, testPod(0)}, watchEvent{watch.Added, testPod(1)},
		watchEvent{watch.Bookmark, bookmark(true)}, watchEvent{watch.Modified, testPod(1)}, watchEvent{watch.Deleted, testPod(0)})
	f := &fakeAPIServer{}
	mux := http.NewServeMux()
	mux.HandleFunc("/api/v1/pods", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.protos = append(f.protos, r.Proto)
		f.mu.Unlock()
		if r.URL.Query().Get("watch") == "true" {
			w.Header().Set("Content-Type", protobufType+";stream=watch")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(stream)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		w.Header().Set("Content-Type", protobufType)
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			_, _ = zw.Write(listBody)
			_ = zw.Close()
			return
		}
		_, _ = w.Write(listBody)
	})
	f.Server = httptest.NewUnstartedServer(mux)
	f.EnableHTTP2 = true
	f.StartTLS()
	t.Cleanup(f.Close)
	return f
}

func TestTapCountsWhatTheClientReceives(t *testing.T) {
	api := newFakeAPIServer(t)
	cert := api.TLS.Certificates[0]
	tap, err := OpenTap(hostListener{}, "test", api.URL, cert, api.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tap.Close() })
	cs, err := kubernetes.NewForConfig(&rest.Config{
		Host:            tap.URL(),
		TLSClientConfig: rest.TLSClientConfig{CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.Certificate().Raw})},
		ContentConfig:   rest.ContentConfig{ContentType: protobufType, AcceptContentTypes: protobufType},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 3 {
		t.Fatalf("the client listed %d pods through the tap, want 3", len(pods.Items))
	}
	if err := poll(ctx, 10*time.Second, 10*time.Millisecond, "the list settled", func() (bool, string, error) {
		p, d := tap.Initial()
		return p == 0 && d == 1, "", nil
	}); err != nil {
		t.Fatal(err)
	}
	start := tap.Counts(PhaseStart)
	l := start.ByKey["list pods"]
	if l == nil || l.Requests != 1 || l.Items != 3 || l.Body == 0 || l.Decoded <= l.Body {
		t.Fatalf("list pods: %+v, want 1 request, 3 items, a gzipped body smaller than decoded", l)
	}
	if start.Received <= l.Body || start.Sent == 0 || start.Connections != 1 {
		t.Errorf("start: received %d (body %d), sent %d, %d connections; want more received than the body (TLS, HTTP/2), some sent, one connection",
			start.Received, l.Body, start.Sent, start.Connections)
	}

	tap.SetPhase(PhaseChurn)
	w, err := cs.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{SendInitialEvents: new(true), AllowWatchBookmarks: true,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	if err != nil {
		t.Fatal(err)
	}
	var got []watch.EventType
	for ev := range w.ResultChan() {
		got = append(got, ev.Type)
		if ev.Type == watch.Deleted {
			break
		}
	}
	w.Stop()
	if len(got) != 5 {
		t.Errorf("the client's watch saw %v, want 5 events", got)
	}
	if err := poll(ctx, 10*time.Second, 10*time.Millisecond, "the watch counted", func() (bool, string, error) {
		p, d := tap.Initial()
		c := tap.Counts(PhaseChurn).ByKey["watch pods"]
		return p == 0 && d == 2 && c != nil && c.Events["DELETED"] == 1, "", nil
	}); err != nil {
		t.Fatal(err)
	}
	churn := tap.Counts(PhaseChurn)
	wc := churn.ByKey["watch pods"]
	if wc.Requests != 1 || wc.Objects() != 4 || wc.Events["BOOKMARK"] != 1 || wc.Items != 0 {
		t.Errorf("watch pods: %+v, want 1 request, 4 objects and a bookmark", wc)
	}
	if churn.Received == 0 || churn.Connections != 0 || len(churn.Errors) != 0 || len(start.Errors) != 0 {
		t.Errorf("churn: received %d, %d new connections, errors %v %v; want bytes on the same connection and no error",
			churn.Received, churn.Connections, start.Errors, churn.Errors)
	}
	if tap.Counts(PhaseStart).ByKey["watch pods"] != nil {
		t.Error("the watch was counted in the phase before it")
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	for _, p := range api.protos {
		if p != "HTTP/2.0" {
			t.Errorf("the tap reached the API server with %s, want HTTP/2.0", p)
		}
	}
	conns := tap.Connections()
	if len(conns) != 1 || conns[0].Received != start.Received+churn.Received {
		t.Errorf("connections %+v, want one that received %d", conns, start.Received+churn.Received)
	}
}

// TestTapSpeaksHTTP2 checks that a client negotiating HTTP/2, as client-go
// does, gets it from the tap.
func TestTapSpeaksHTTP2(t *testing.T) {
	api := newFakeAPIServer(t)
	roots := api.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	tap, err := OpenTap(hostListener{}, "test", api.URL, api.TLS.Certificates[0], roots)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tap.Close() })
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}}
	resp, err := c.Get(tap.URL() + "/api/v1/pods")
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Errorf("the tap answered with %s, want HTTP/2", resp.Proto)
	}
	// The transport asked for gzip itself, and undid it.
	if !resp.Uncompressed || body.Len() == 0 {
		t.Errorf("uncompressed %v, %d bytes: the tap must relay the compressed answer as it is", resp.Uncompressed, body.Len())
	}
}
