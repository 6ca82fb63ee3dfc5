package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
)

// forgingLedger is a ledger unsupported for a reason that, printed raw,
// would start a line of its own.
type forgingLedger struct{}

func (forgingLedger) Name() string { return "proxy" }
func (forgingLedger) Collect(context.Context, *snapshot.Snapshot) error {
	return source.Unsupported("a listener answers as x\x1b[31m\nok: 0 findings")
}

// /readyz is read by people too: what it quotes of a source's reason is
// escaped, on its one line.
func TestReadyzEscapesWhatItQuotes(t *testing.T) {
	h := startWith(t, fake.NewClientset(cluster()...), reportOnly, func(_ *harness, c *Config) {
		c.Ledgers = []source.Source{forgingLedger{}}
	})
	poll.Until(t, patience, "a complete audit", func() bool { st := h.agent.Status(); return !st.LastAudit.IsZero() && st.Degraded == "" })
	rec := httptest.NewRecorder()
	h.agent.Handler(h.reg).ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	body := rec.Body.String()
	if rec.Code != http.StatusOK || strings.Count(body, "\n") != 1 || !strings.Contains(body, `a listener answers as x\x1b[31m\nok: 0 findings`) {
		t.Errorf("/readyz = %d %q; want 200, one line, the reason escaped", rec.Code, body)
	}
	for _, r := range body {
		if r != '\n' && !strconv.IsPrint(r) {
			t.Errorf("/readyz holds %q", r)
		}
	}
}
