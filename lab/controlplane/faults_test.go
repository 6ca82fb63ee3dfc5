package controlplane

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/internal/testenv"
)

// The API server's faults as its clients meet them: paused, a request
// waits and gets no answer, and is answered once it runs again; stopped,
// a request is refused at once, Check says nothing of it, and once started
// again on the same port and etcd it serves what was written before.
func TestAPIServerFaults(t *testing.T) {
	bin, err := FindBinaries()
	if errors.Is(err, ErrNoBinaries) {
		testenv.Unavailable(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cp, err := Start(ctx, Options{Bin: bin})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	// Start returns once the controller manager is past its own wait
	// for a healthy API server: the faults below would otherwise make it
	// give up and exit.
	if err := logHas(filepath.Join(cp.Dir, "kube-controller-manager.log"), endpointSliceSynced); err != nil {
		t.Fatalf("Start returned before the controller manager's EndpointSlice controller synced its caches (%v)", err)
	}
	cfg := cp.Config(UserAdmin)
	cfg.Timeout = 2 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	get := func() error {
		_, err := client.CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{})
		return err
	}

	if err := cp.PauseAPIServer(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := get(); err == nil {
		t.Error("a paused API server answered")
	} else if waited := time.Since(start); waited < time.Second {
		t.Errorf("a paused API server failed the request after %s (%v); want it held until the client gives up", waited, err)
	}
	if err := cp.ResumeAPIServer(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, poll.Patience, "the resumed API server to answer", func() bool { return get() == nil })

	if err := cp.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := get(); err == nil {
		t.Error("a stopped API server answered")
	}
	if err := cp.Check(); err != nil {
		t.Errorf("Check reports the API server stopped on purpose: %v", err)
	}
	if err := cp.PauseAPIServer(); err == nil {
		t.Error("a stopped API server was paused")
	}
	if err := cp.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	// Ready is the server's word: the first request may still meet a
	// connection the client kept from before; it then serves what was
	// written before.
	poll.Until(t, poll.Patience, "the restarted API server to serve what was written before", func() bool { return get() == nil })
	if err := cp.Check(); err != nil {
		t.Error(err)
	}
	if n := len(cp.Logs()); n != 4 {
		t.Errorf("%d logs, want etcd's, both API servers' and the controller manager's", n)
	}
}
