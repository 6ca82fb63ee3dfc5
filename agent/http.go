package agent

import (
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ghostwatch/ghostwatch/internal/text"
)

// Handler serves /metrics from g, /healthz (the loop is running and has
// audited within twice the audit interval) and /readyz (the last audit was
// complete and the live sources are complete and current now, so the agent
// may act, and no limit refused its actions; what it did not judge is
// said). An audit may wait a minute on
// an API server that stopped answering: /readyz asks the sources rather
// than wait for it to end.
func (a *Agent) Handler(g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		st := a.Status()
		switch {
		case !st.Running:
			http.Error(w, "agent loop not running", http.StatusServiceUnavailable)
		case !st.LastAudit.IsZero() && a.cfg.Now().Sub(st.LastAudit) > 2*a.cfg.AuditInterval:
			http.Error(w, fmt.Sprintf("no audit for %s", a.cfg.Now().Sub(st.LastAudit).Round(time.Second)), http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(w, "ok")
		}
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		st := a.Status()
		stale := a.liveNotReady()
		switch {
		case st.LastAudit.IsZero():
			http.Error(w, "no audit yet", http.StatusServiceUnavailable)
		case st.Degraded != "":
			http.Error(w, "degraded: "+text.Escape(st.Degraded), http.StatusServiceUnavailable)
		case stale != nil:
			http.Error(w, "degraded: "+reasonCacheStale+": "+text.Escape(stale.Error()), http.StatusServiceUnavailable)
		case st.Refused != "":
			// As ghostwatch_degraded says: the agent refuses to act.
			http.Error(w, "degraded: "+text.Escape(st.Refused), http.StatusServiceUnavailable)
		default:
			// Ready: the rest is judged; what is not is said.
			msg := fmt.Sprintf("ok: %d findings in the last audit", st.Findings)
			if st.Blind != "" {
				msg += "; not judged on this node: " + st.Blind
			}
			if st.Unread != "" {
				msg += "; not judged, a ledger unread: " + st.Unread
			}
			// What a source said is escaped: people read this too.
			fmt.Fprintln(w, text.Escape(msg))
		}
	})
	return mux
}

// liveNotReady is why a live source is not complete and current now; nil
// when every one is.
func (a *Agent) liveNotReady() error {
	now := a.cfg.Now()
	for _, l := range a.live {
		if err := l.Ready(now); err != nil {
			return err
		}
	}
	return nil
}
