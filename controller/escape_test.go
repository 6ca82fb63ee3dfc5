package controller

import (
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ghostwatch/ghostwatch/internal/poll"
)

// A standby's /readyz names the leader as the Lease holds it: escaped, on
// its one line, whatever identity the Lease was written with.
func TestReadyzEscapesTheLeader(t *testing.T) {
	const forged = "replica-a\x1b[31m\nok: leading, 0 findings"
	client := fake.NewClientset(podWithIP("web-0", "0", "node-a", "10.244.2.2", time.Now().Add(-time.Hour)))
	a := startReplica(t, client, forged)
	poll.Until(t, poll.Patience, "the first replica to lead", func() bool { return a.c.Status().Leading })
	b := startReplica(t, client, "replica-b")
	poll.Until(t, poll.Patience, "replica-b to see the leader", func() bool { return b.c.Status().Leader == forged })
	srv := httptest.NewServer(b.c.Handler(prometheus.NewRegistry()))
	defer srv.Close()
	body := get(t, srv.URL+"/readyz")
	if want := `ok: standing by (leader: replica-a\x1b[31m\nok: leading, 0 findings)` + "\n"; body != want {
		t.Errorf("standby /readyz: %q, want %q", body, want)
	}
	for _, r := range body {
		if r != '\n' && !strconv.IsPrint(r) {
			t.Errorf("/readyz holds %q", r)
		}
	}
}
