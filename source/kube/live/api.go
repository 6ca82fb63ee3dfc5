package live

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/kube"
)

// DefaultTimeout bounds APISource.Collect when its Timeout is zero.
const DefaultTimeout = 30 * time.Second

// APISource reads the cluster objects from the API server, for a one-shot
// scan. It implements source.Source.
type APISource struct {
	// Client talks to the API server (see kube.ClientFromFlags).
	Client kubernetes.Interface
	// Timeout bounds the whole collection: reaching the server and listing
	// every resource. Zero means DefaultTimeout.
	Timeout time.Duration
	// Informers, when set, are read instead of new ones made from Client;
	// the caller must have started them. Client may then be nil.
	Informers *Informers
	// Holders looks up the pods at the addresses the rules ask about,
	// when Informers are scoped to a node (source.Resolver).
	Holders *Holders

	readers []any
}

// Narrow records the rules that read the cluster objects
// (source.Narrower): those that are snapshot.HolderReaders say which
// holders to look up.
func (a *APISource) Narrow(readers []any) { a.readers = readers }

// Resolve completes the cluster objects of a node's informers once every
// source has collected (source.Resolver): the pods at the addresses the
// rules ask about are looked up and added, and those that cannot be are
// listed in Kube.Unlooked. A failed lookup leaves s untouched.
func (a *APISource) Resolve(ctx context.Context, s *snapshot.Snapshot) error {
	if s.Kube == nil || !s.Kube.PodsPartial {
		return nil
	}
	k, err := resolveHolders(ctx, a.Holders, a.readers, s)
	if err != nil {
		return err
	}
	if k != s.Kube && a.Informers != nil && a.Informers.since != nil {
		k.Endpoints = learnSince(k, a.Informers.since)
	}
	s.Kube = k
	return nil
}

// learnSince returns k's endpoints with each one at a looked-up address
// whose listed pod was found there dated from that pod's start, when it is
// earlier than when the address was first seen listed for it; since
// remembers it for the next snapshots.
func learnSince(k *snapshot.Kube, since *endpointSince) []snapshot.Endpoint {
	byUID := map[string]*snapshot.Pod{}
	for i := range k.Pods {
		byUID[k.Pods[i].UID] = &k.Pods[i]
	}
	var out []snapshot.Endpoint
	for i := range k.Endpoints {
		ep := &k.Endpoints[i]
		if ep.PodUID == "" || !k.Looked[ep.Address] {
			continue
		}
		p := byUID[ep.PodUID]
		if p == nil || !p.HasIP(ep.Address) || p.Since().IsZero() || !p.Since().Before(ep.Since) {
			continue
		}
		if out == nil {
			out = slices.Clone(k.Endpoints)
		}
		out[i].Since = p.Since()
		since.learn(ep.Address, ep.PodUID, p.Since())
	}
	if out == nil {
		return k.Endpoints
	}
	return out
}

// Describe says how many objects of each kind were read.
func (a *APISource) Describe(s *snapshot.Snapshot) string { return kube.Describe(s.Kube) }

// Name returns "kube".
func (a *APISource) Name() string { return kube.Name }

// Collect checks that the API server answers, lists Pods, Services,
// EndpointSlices and Nodes, and sets s.Kube. Its errors name the server and
// say what failed; it sets nothing unless every resource was listed.
func (a *APISource) Collect(ctx context.Context, s *snapshot.Snapshot) error {
	if a.Client == nil && a.Informers == nil {
		return errors.New("no Kubernetes client")
	}
	timeout := a.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	server := "API server"
	if u := kube.ServerURL(a.Client); u != "" {
		server += " " + u
	}
	if a.Client != nil {
		if err := kube.Probe(ctx, a.Client); err != nil {
			return fmt.Errorf("%s %s", server, kube.DescribeProbe(err, roundWait(deadline.Sub(start))))
		}
	}
	inf := a.Informers
	if inf == nil {
		inf = NewInformers(a.Client, InformerOptions{})
		inf.Start(ctx) // stopped by cancel
	}
	if err := inf.WaitForSync(ctx); err != nil {
		var se *SyncError
		if errors.As(err, &se) && errors.Is(se.Err, context.DeadlineExceeded) {
			// The whole bound, not the time left after the probe.
			se.Waited = deadline.Sub(start)
		}
		return fmt.Errorf("%s: %w", server, err)
	}
	s.Kube = inf.Snapshot()
	return nil
}
