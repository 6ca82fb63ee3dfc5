package agent

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
)

// facts fingerprints, per address, everything the conntrack rules read
// about a backend: the services it is an endpoint of and with which
// conditions, the pods that hold it and whether they are going, the node
// that owns it. Between two audits, a flow whose backend's fingerprint did
// not change keeps its verdict; only the others need judging again.
type facts struct {
	byAddr map[netip.Addr]string
	// endpoints holds the addresses that are an endpoint of some service.
	endpoints map[netip.Addr]bool
	// frontends fingerprints the services' frontends: when it changes, a
	// flow's service may have changed, so the whole table is judged again.
	frontends string
}

func factsOf(k *snapshot.Kube) *facts {
	fx := &facts{byAddr: map[netip.Addr]string{}, endpoints: map[netip.Addr]bool{}}
	if k == nil {
		return fx
	}
	parts := map[netip.Addr][]string{}
	for _, e := range k.Endpoints {
		a := e.Address.Unmap()
		fx.endpoints[a] = true
		parts[a] = append(parts[a], fmt.Sprintf("ep %s/%s %s %t%t%t", e.Service.Namespace, e.Service.Name, e.Slice, e.Ready, e.Serving, e.Terminating))
	}
	for i := range k.Pods {
		p := &k.Pods[i]
		for _, ip := range p.IPs {
			a := ip.Unmap()
			parts[a] = append(parts[a], fmt.Sprintf("pod %s %t %t %s %d", p.UID, p.HostNetwork, p.Deleting, p.Phase, p.Since().UnixNano()))
		}
	}
	for _, n := range k.Nodes {
		for _, ip := range n.Addresses {
			a := ip.Unmap()
			parts[a] = append(parts[a], "node "+n.Name)
		}
	}
	for a, ps := range parts {
		sort.Strings(ps)
		fx.byAddr[a] = strings.Join(ps, ";")
	}
	var fe []string
	for _, s := range k.Services {
		fe = append(fe, fmt.Sprintf("%+v", s))
	}
	fe = append(fe, fmt.Sprintf("%+v", k.Nodes))
	fx.frontends = strings.Join(fe, "\n")
	return fx
}

// changed returns the addresses whose fingerprint differs between old and
// fx, in either direction.
func (fx *facts) changed(old *facts) []netip.Addr {
	var out []netip.Addr
	for a, s := range fx.byAddr {
		if old.byAddr[a] != s {
			out = append(out, a)
		}
	}
	for a := range old.byAddr {
		if _, ok := fx.byAddr[a]; !ok {
			out = append(out, a)
		}
	}
	return out
}

// indexSource is the conntrack source of an audit driven by a change: the
// flows to the backends whose facts changed since the last complete audit,
// to the backends of that audit's findings, and to backends that are no
// endpoint and got new flows since. It reads no table.
type indexSource struct {
	a    *Agent
	keep conntrack.Keep
}

func (s *indexSource) Name() string { return conntrack.Name }

func (s *indexSource) Collect(_ context.Context, snap *snapshot.Snapshot) error {
	a := s.a
	fx := factsOf(snap.Kube)
	a.nextFacts = fx
	var flows []snapshot.Flow
	if fx.frontends != a.facts.frontends {
		// A service or node changed: any flow may address another
		// frontend now. The index is in memory; judge all of it.
		a.index.takeDirty()
		flows = a.index.all()
	} else {
		cands := append(fx.changed(a.facts), a.suspects...)
		for _, b := range a.index.takeDirty() {
			if !fx.endpoints[b] {
				cands = append(cands, b)
			}
		}
		flows = a.index.flowsTo(cands)
	}
	kept := flows[:0]
	for i := range flows {
		if s.keep(&flows[i]) {
			kept = append(kept, flows[i])
		}
	}
	snap.Conntrack = &snapshot.Conntrack{Flows: kept, Seen: a.index.len()}
	return nil
}
