package controller

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ghostwatch/ghostwatch/internal/text"
)

// Handler serves /metrics from g, /healthz (the process answers) and
// /readyz: a standby replica is ready (it campaigns for the Lease) while
// the API server answers; the leader once it has listed every Pod and run
// the rules, and while its last pass could trust the cluster's objects.
// What it quotes (the Lease's holder, the API server's errors) is escaped:
// people read it too.
func (c *Controller) Handler(g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		st := c.Status()
		switch {
		case st.Unreachable != "":
			http.Error(w, "not ready: "+text.Escape(st.Unreachable), http.StatusServiceUnavailable)
		case !st.Leading:
			leader := st.Leader
			if leader == "" {
				leader = "none yet"
			}
			text.Fprintf(w, "ok: standing by (leader: %s)\n", leader) // as the Lease holds it
		case !st.Synced || st.LastPass.IsZero():
			http.Error(w, "leading, listing the cluster", http.StatusServiceUnavailable)
		case st.Degraded != "":
			http.Error(w, "leading, degraded: "+text.Escape(st.Degraded), http.StatusServiceUnavailable)
		default:
			fmt.Fprintf(w, "ok: leading, %d findings in the last pass\n", st.Findings)
		}
	})
	return mux
}
