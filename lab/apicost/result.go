package apicost

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// Result is what Run measured.
type Result struct {
	Sizes        Sizes   `json:"sizes"`
	Machine      Machine `json:"machine"`
	AgentBinary  string  `json:"agentBinary"`
	AgentVersion string  `json:"agentVersion,omitempty"`
	// Setup is the seconds taken to start the control plane and build the
	// cluster, until every pod was ready in its EndpointSlice.
	Setup float64 `json:"setupSeconds"`
	// Start is the seconds from kube-proxy's start to the end of the start
	// phase; Churn the churn phase's.
	Start float64 `json:"startSeconds"`
	Churn float64 `json:"churnSeconds"`
	// Total is the whole run's seconds, shutdown excepted.
	Total   float64        `json:"totalSeconds"`
	Clients []ClientResult `json:"clients"`
	// Notes are disagreements between the audit log and the taps, and
	// answers the taps failed to relay or decode.
	Notes []string `json:"notes,omitempty"`
}

// Machine is where the run ran.
type Machine struct {
	CPUs       int    `json:"cpus"`
	Kernel     string `json:"kernel"`
	Kubernetes string `json:"kubernetes"`
}

// ClientResult is one client's cost.
type ClientResult struct {
	Name string `json:"name"`
	User string `json:"user"`
	// SyncedAfter is the seconds from the client's start to the end of the
	// start phase.
	SyncedAfter float64 `json:"syncedAfterSeconds"`
	// Phases are start and churn.
	Phases []PhaseCost `json:"phases"`
	// RSSAfterSync and RSSAfterChurn are VmRSS at the end of each phase,
	// HWM VmHWM at the end of the churn; bytes.
	RSSAfterSync  int64       `json:"rssAfterSyncBytes"`
	RSSAfterChurn int64       `json:"rssAfterChurnBytes"`
	HWM           int64       `json:"hwmBytes"`
	Connections   []ConnStats `json:"connections"`
	// Requests are the client's requests in the audit log, every phase.
	Requests []AuditRequest `json:"-"`
}

// Phase returns the client's cost in phase p.
func (c ClientResult) Phase(p Phase) PhaseCost {
	for _, pc := range c.Phases {
		if pc.Phase == p.String() {
			return pc
		}
	}
	return PhaseCost{Phase: p.String()}
}

// PhaseCost is a client's cost in one phase.
type PhaseCost struct {
	Phase string `json:"phase"`
	// Requests are from the audit log; TapRequests what the tap saw.
	Requests    int `json:"requests"`
	TapRequests int `json:"tapRequests"`
	// Objects are list items, single objects and watch events carrying a
	// change (KeyCounts.Objects).
	Objects int `json:"objects"`
	// Received and Sent are the client's TCP bytes (Counts).
	Received         int64     `json:"receivedBytes"`
	Sent             int64     `json:"sentBytes"`
	UpstreamReceived int64     `json:"upstreamReceivedBytes"`
	UpstreamSent     int64     `json:"upstreamSentBytes"`
	Connections      int       `json:"connections"`
	ByKey            []KeyCost `json:"byRequest"`
	Errors           []string  `json:"errors,omitempty"`
}

// KeyCost is what the requests of one Request.Key cost in a phase.
type KeyCost struct {
	Key         string         `json:"request"`
	Requests    int            `json:"requests"`
	TapRequests int            `json:"tapRequests"`
	Objects     int            `json:"objects"`
	Items       int            `json:"items"`
	Events      map[string]int `json:"events,omitempty"`
	Body        int64          `json:"bodyBytes"`
	Decoded     int64          `json:"decodedBytes"`
}

// Client returns the named client's result.
func (r *Result) Client(name string) ClientResult {
	for _, c := range r.Clients {
		if c.Name == name {
			return c
		}
	}
	return ClientResult{Name: name}
}

// ratio is a/b, NaN when b is 0.
func ratio(a, b int64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

// Lines are the machine-readable results, one key=value a line.
func (r *Result) Lines() []string {
	kp, ag := r.Client(ClientKubeProxy), r.Client(ClientAgent)
	return []string{
		fmt.Sprintf("pods=%d", r.Sizes.Pods),
		fmt.Sprintf("nodes=%d", r.Sizes.Nodes),
		fmt.Sprintf("services=%d", r.Sizes.Services),
		fmt.Sprintf("replacements=%d", r.Sizes.Replacements),
		fmt.Sprintf("replacement_rate=%g", r.Sizes.Rate),
		fmt.Sprintf("agent_api_bytes_start=%d", ag.Phase(PhaseStart).Received),
		fmt.Sprintf("kube_proxy_api_bytes_start=%d", kp.Phase(PhaseStart).Received),
		fmt.Sprintf("agent_api_bytes_churn=%d", ag.Phase(PhaseChurn).Received),
		fmt.Sprintf("kube_proxy_api_bytes_churn=%d", kp.Phase(PhaseChurn).Received),
		fmt.Sprintf("agent_api_bytes_ratio_vs_kube_proxy_start=%.2f", ratio(ag.Phase(PhaseStart).Received, kp.Phase(PhaseStart).Received)),
		fmt.Sprintf("agent_api_bytes_ratio_vs_kube_proxy=%.2f", ratio(ag.Phase(PhaseChurn).Received, kp.Phase(PhaseChurn).Received)),
		fmt.Sprintf("agent_rss_after_sync_bytes=%d", ag.RSSAfterSync),
		fmt.Sprintf("kube_proxy_rss_after_sync_bytes=%d", kp.RSSAfterSync),
		fmt.Sprintf("agent_rss_after_churn_bytes=%d", ag.RSSAfterChurn),
		fmt.Sprintf("kube_proxy_rss_after_churn_bytes=%d", kp.RSSAfterChurn),
		fmt.Sprintf("agent_hwm_bytes=%d", ag.HWM),
		fmt.Sprintf("kube_proxy_hwm_bytes=%d", kp.HWM),
		fmt.Sprintf("setup_seconds=%.1f", r.Setup),
		fmt.Sprintf("run_seconds=%.1f", r.Total),
	}
}

// WriteText writes the summary table, what each client asked for, the
// notes and the Lines.
func (r *Result) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "API cost of one node's clients: %d pods on %d Nodes, %d Services; %d replacements at %g/s\n",
		r.Sizes.Pods, r.Sizes.Nodes, r.Sizes.Services, r.Sizes.Replacements, r.Sizes.Rate)
	fmt.Fprintf(&b, "machine: %d CPUs, Linux %s, Kubernetes %s; agent %s (%s)\n", r.Machine.CPUs, r.Machine.Kernel, r.Machine.Kubernetes, r.AgentBinary, r.AgentVersion)
	fmt.Fprintf(&b, "setup %.0fs; start phase %.0fs (kube-proxy synced %.0fs after its start, the agent %.0fs after its); churn phase %.0fs; run %.0fs\n\n",
		r.Setup, r.Start, r.Client(ClientKubeProxy).SyncedAfter, r.Client(ClientAgent).SyncedAfter, r.Churn, r.Total)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tclient\trequests\tobjects\treceived\tsent\tconnections\tRSS at end\t")
	for _, p := range []Phase{PhaseStart, PhaseChurn} {
		for _, c := range r.Clients {
			pc := c.Phase(p)
			rss := c.RSSAfterSync
			if p == PhaseChurn {
				rss = c.RSSAfterChurn
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%d\t%s\t\n", p, c.Name, pc.Requests, pc.Objects, kB(pc.Received), kB(pc.Sent), pc.Connections, mib(rss))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var peaks []string
	for _, c := range r.Clients {
		peaks = append(peaks, fmt.Sprintf("%s %s", c.Name, mib(c.HWM)))
	}
	fmt.Fprintf(&b, "peak RSS (VmHWM): %s\n", strings.Join(peaks, ", "))
	fmt.Fprintf(&b, "received/sent: TCP bytes on the client's connections (TLS, HTTP/2 framing, headers, bodies as sent, gzip included); requests: the audit log; objects: list items and watch events carrying a change, decoded by the tap\n")
	var up []string
	for _, c := range r.Clients {
		up = append(up, fmt.Sprintf("%s %s and %s", c.Name, kB(c.Phase(PhaseStart).UpstreamReceived), kB(c.Phase(PhaseChurn).UpstreamReceived)))
	}
	fmt.Fprintf(&b, "the taps' own connections received from the API server, start and churn (a cross-check): %s\n\n", strings.Join(up, "; "))

	fmt.Fprintln(&b, "what each asked for (requests from the audit log; objects, events and body bytes from the tap):")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "client\tphase\trequests\tobjects\tbookmarks\tbody\tdecoded\trequest")
	for _, c := range r.Clients {
		for _, p := range []Phase{PhaseStart, PhaseChurn} {
			for _, k := range c.Phase(p).ByKey {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", c.Name, p, k.Requests, k.Objects, k.Events["BOOKMARK"], kB(k.Body), kB(k.Decoded), k.Key)
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Notes) > 0 {
		fmt.Fprintln(&b, "\nnotes:")
		for _, n := range r.Notes {
			fmt.Fprintln(&b, "  "+n)
		}
	}
	fmt.Fprintln(&b)
	for _, l := range r.Lines() {
		fmt.Fprintln(&b, l)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes r as one indented JSON object.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// kB writes n bytes in kB (1000 bytes), or MB from 10 MB on.
func kB(n int64) string {
	if n >= 10_000_000 {
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	}
	return fmt.Sprintf("%.1f kB", float64(n)/1e3)
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
