// Package proxy finds out what translates Service addresses on this node,
// and so whether that translation shows in the conntrack table the agent
// judges: kube-proxy in iptables or nftables mode translates with the
// kernel's NAT, whose mappings conntrack holds; in IPVS mode it does so
// only with net.ipv4.vs.conntrack=1 (which kube-proxy sets); an eBPF load
// balancer (Cilium's kube-proxy replacement, its socket load balancing)
// translates outside conntrack, where ghostwatch cannot see a ghost.
//
// The node is not a trusted place: any local process may listen on a port
// nothing holds and answer as kube-proxy or Cilium would. An answer that
// would leave the flow rules out is believed only when the kernel's socket
// tables (/proc/net/tcp, tcp6) say root opened every listener that takes
// the question; otherwise the rules are judged, and the source says whose
// answer was not believed.
package proxy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
)

// Name is the source's name in reports.
const Name = "proxy"

// Defaults: where kube-proxy serves /proxyMode (its --metrics-bind-address)
// and where the Cilium agent answers its health checks, on the node.
const (
	DefaultKubeProxy = "127.0.0.1:10249"
	DefaultCilium    = "127.0.0.1:9879"
)

// timeout bounds each question.
const timeout = 2 * time.Second

// Source asks the node who translates Services. Its status is ok when
// the translation shows in conntrack, or nothing says otherwise, and
// unsupported, with why, when it does not: the rules that judge Service
// flows are then not judged here (rule.Info.Guards).
type Source struct {
	// KubeProxy is kube-proxy's metrics address; DefaultKubeProxy when "".
	KubeProxy string
	// Cilium is the Cilium agent's health address; DefaultCilium when "".
	Cilium string
	// Proc is where /proc/sys is read ("" means /proc): the agent runs in
	// the node's network namespace, whose sysctls it shows.
	Proc string
	// Client asks; nil means one with a 2 s timeout.
	Client *http.Client
	// Every is how long an answer stands (DefaultEvery when zero): the
	// agent collects at every audit, and the proxy changes with a
	// redeploy, not a flow.
	Every time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Log, when set, is told when an answer that would leave the flow
	// rules out is not believed, and when that ends.
	Log *slog.Logger

	mu   sync.Mutex
	at   time.Time
	last *snapshot.ServiceProxy
	err  error
	// doubt is why the last answer was not believed; "" when it was, or
	// when nothing needed to be.
	doubt string
}

// DefaultEvery is Source.Every when zero.
const DefaultEvery = time.Minute

// Name returns Name.
func (*Source) Name() string { return Name }

// Collect sets s.ServiceProxy, or fails with source.ErrUnsupported saying
// why Service NAT does not show in conntrack on this node.
func (src *Source) Collect(ctx context.Context, s *snapshot.Snapshot) error {
	now := time.Now
	if src.Now != nil {
		now = src.Now
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	every := src.Every
	if every <= 0 {
		every = DefaultEvery
	}
	if src.at.IsZero() || now().Sub(src.at) >= every {
		src.last, src.err = nil, nil
		p := &snapshot.Snapshot{}
		was := src.doubt
		src.doubt = ""
		src.err = src.ask(ctx, p)
		src.last, src.at = p.ServiceProxy, now()
		if src.Log != nil && src.doubt != was {
			if src.doubt != "" {
				src.Log.Warn("an answer that would leave the flow rules out is not believed: they are judged", "source", Name, "why", src.doubt)
			} else {
				src.Log.Info("the proxy's answer is no longer doubted", "source", Name)
			}
		}
	}
	if src.err != nil {
		return src.err
	}
	s.ServiceProxy = src.last
	return nil
}

// ask asks the node afresh.
func (src *Source) ask(ctx context.Context, s *snapshot.Snapshot) error {
	kp := cmp.Or(src.KubeProxy, DefaultKubeProxy)
	mode, err := src.get(ctx, "http://"+kp+"/proxyMode")
	if err == nil {
		mode = strings.TrimSpace(mode)
		p := &snapshot.ServiceProxy{Mode: mode, By: "kube-proxy at " + kp}
		switch mode {
		case "iptables", "nftables":
		case "ipvs":
			v, err := os.ReadFile(filepath.Join(cmp.Or(src.Proc, "/proc"), "sys/net/ipv4/vs/conntrack"))
			switch {
			case err != nil:
				p.Note = fmt.Sprintf("net.ipv4.vs.conntrack cannot be read (%v); kube-proxy sets it to 1", err)
			case strings.TrimSpace(string(v)) != "1":
				// Blind only on the word of a listener no unprivileged
				// process could have opened.
				if who, err := src.owner(kp); err != nil {
					p.Note = fmt.Sprintf("%s says IPVS mode at %s; not taken as kube-proxy (%v): Service NAT assumed in conntrack, and the flow rules judged", who, kp, err)
					src.doubt = p.Note
					break
				}
				return source.Unsupported("kube-proxy at %s runs in IPVS mode with net.ipv4.vs.conntrack=%s: IPVS translates Services without conntrack entries, so ghostwatch cannot see their flows here (kube-proxy sets it to 1; something set it back)", kp, strings.TrimSpace(string(v)))
			}
		default:
			p.Note = "a mode ghostwatch does not know: Service NAT assumed in conntrack"
		}
		s.ServiceProxy = p
		return nil
	}
	cl := cmp.Or(src.Cilium, DefaultCilium)
	if _, cerr := src.get(ctx, "http://"+cl+"/healthz"); cerr == nil {
		// Any local process may answer there: the flow rules are left out
		// only on the word of a listener the kernel says root opened.
		who, oerr := src.owner(cl)
		if oerr != nil {
			s.ServiceProxy = &snapshot.ServiceProxy{Note: fmt.Sprintf("no kube-proxy answers at %s (%v); %s answers at %s; not taken as Cilium (%v): Service NAT assumed in conntrack, and the flow rules judged", kp, err, who, cl, oerr)}
			src.doubt = s.ServiceProxy.Note
			return nil
		}
		return source.Unsupported("no kube-proxy answers at %s, and a Cilium agent answers at %s (%s): Cilium's kube-proxy replacement translates Services in eBPF, outside conntrack, so ghostwatch cannot see their flows here (%v)", kp, cl, who, err)
	}
	s.ServiceProxy = &snapshot.ServiceProxy{Note: fmt.Sprintf("no kube-proxy answers at %s (%v), nor a Cilium agent at %s: Service NAT assumed in conntrack; if an eBPF load balancer serves Services here, ghostwatch cannot see their flows (give --kube-proxy-metrics-address where kube-proxy serves)", kp, err, cl)}
	return nil
}

// owner says who listens at addr (host:port) on this node, as the
// kernel's socket tables under Proc say, and fails unless every listener
// that takes connections there was opened by root: an unprivileged process
// may bind any port above 1023 that nothing holds, and answer as anything.
func (src *Source) owner(addr string) (who string, err error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return "something", fmt.Errorf("%s is not an address and port, so its listener cannot be looked up in the kernel's socket tables", addr)
	}
	proc := cmp.Or(src.Proc, "/proc")
	ls, err := listeners(proc, ap)
	switch {
	case err != nil:
		return "something", fmt.Errorf("its listener cannot be looked up: %w", err)
	case len(ls) == 0:
		return "something", fmt.Errorf("%s/net/tcp lists no socket listening there, so who answers is not known", proc)
	}
	var names []string
	for _, l := range ls {
		names = append(names, l.String())
	}
	who = strings.Join(names, " and ")
	if bad := untrusted(ls); len(bad) > 0 {
		return bad[0].String(), errors.New("not root: any local user may open a listener there")
	}
	return who, nil
}

// Describe says who translates Services (source.Describer).
func (*Source) Describe(s *snapshot.Snapshot) string {
	p := s.ServiceProxy
	if p == nil {
		return ""
	}
	var parts []string
	if p.By != "" {
		parts = append(parts, p.By+", mode "+p.Mode+": Service NAT in conntrack")
	}
	if p.Note != "" {
		parts = append(parts, p.Note)
	}
	return strings.Join(parts, "; ")
}

func (src *Source) get(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	c := src.Client
	if c == nil {
		c = &http.Client{Timeout: timeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", unwrap(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", url, resp.Status)
	}
	return string(b), nil
}

// unwrap drops the URL the client's error repeats.
func unwrap(err error) error {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) {
		if inner := ue.Unwrap(); inner != nil {
			return inner
		}
	}
	return err
}
