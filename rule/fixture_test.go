package rule

import (
	"net/netip"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Fixture builders for the rule tables: short, so each case reads as the
// incident it models.

var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

func ips(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, ip(s))
	}
	return out
}

func pod(ns, name, uid, ipAddr string, since time.Time) snapshot.Pod {
	return snapshot.Pod{UID: uid, Namespace: ns, Name: name, Node: "node-a", Phase: snapshot.PodRunning,
		IPs: ips(ipAddr), Created: since, StartTime: since}
}

func deleting(p snapshot.Pod) snapshot.Pod { p.Deleting = true; return p }

func hostNet(p snapshot.Pod) snapshot.Pod { p.HostNetwork = true; return p }

func phase(p snapshot.Pod, ph string) snapshot.Pod { p.Phase = ph; return p }

func svc(ns, name, clusterIP string, proto snapshot.Proto, port, nodePort uint16) snapshot.Service {
	s := snapshot.Service{Namespace: ns, Name: name, Type: snapshot.ServiceClusterIP, HasSelector: true,
		Ports: []snapshot.ServicePort{{Name: "p", Protocol: proto, Port: port, NodePort: nodePort}}}
	if clusterIP != "" {
		s.ClusterIPs = ips(clusterIP)
	}
	if nodePort != 0 {
		s.Type = snapshot.ServiceNodePort
	}
	return s
}

func ep(ns, svcName, slice, addr string, ready, terminating bool) snapshot.Endpoint {
	return snapshot.Endpoint{Service: snapshot.ObjectRef{Namespace: ns, Name: svcName}, Slice: slice,
		Address: ip(addr), Ready: ready, Serving: ready || terminating, Terminating: terminating}
}

// podEP gives an endpoint a Pod targetRef.
func podEP(e snapshot.Endpoint, ns, name string) snapshot.Endpoint {
	e.Pod = &snapshot.ObjectRef{Namespace: ns, Name: name}
	return e
}

func notServing(e snapshot.Endpoint) snapshot.Endpoint { e.Serving = false; return e }

func node(name string, addrs ...string) snapshot.Node {
	return snapshot.Node{Name: name, Addresses: ips(addrs...)}
}

// flow builds a DNATed flow: client -> frontend, translated to backend.
func flow(proto snapshot.Proto, client, frontend, backend string) snapshot.Flow {
	c := netip.MustParseAddrPort(client)
	fe := netip.MustParseAddrPort(frontend)
	be := netip.MustParseAddrPort(backend)
	f := snapshot.Flow{
		Proto:   proto,
		Orig:    snapshot.Tuple{Src: c.Addr(), Dst: fe.Addr(), SrcPort: c.Port(), DstPort: fe.Port()},
		Reply:   snapshot.Tuple{Src: be.Addr(), Dst: c.Addr(), SrcPort: be.Port(), DstPort: c.Port()},
		Status:  snapshot.StatusAssured | snapshot.StatusSeenReply | snapshot.StatusDstNAT,
		Timeout: 431999,
	}
	if proto == snapshot.ProtoTCP {
		f.State = "ESTABLISHED"
	}
	return f
}

func state(f snapshot.Flow, s string) snapshot.Flow { f.State = s; return f }

func started(f snapshot.Flow, at time.Time) snapshot.Flow { f.Start = at; return f }

func snap(k snapshot.Kube, flows ...snapshot.Flow) *snapshot.Snapshot {
	return &snapshot.Snapshot{
		Taken:     t0.Add(time.Hour),
		NodeName:  "node-a",
		Kube:      &k,
		Conntrack: snapshot.NewConntrack(len(flows), flows...),
		Sources: []snapshot.SourceStatus{
			{Name: "kube", Status: snapshot.StatusOK},
			{Name: "conntrack", Status: snapshot.StatusOK},
		},
	}
}
