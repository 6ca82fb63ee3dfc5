package gossip

import (
	"cmp"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// AnnotationPrefix starts the annotations that name a pod's gossip agent
// (ghostwatch.io/gossip, ghostwatch.io/gossip-port, ...): whoever finds the
// agents among the pods keeps these annotations, and need keep no other.
const AnnotationPrefix = "ghostwatch.io/gossip"

// The annotations that name a pod's gossip agent. Each cluster they
// describe is read from one member's agent at a time: the oldest running
// pod's, or the next one's when it cannot be read.
const (
	// AnnotationGossip is the agent's system: consul (its HTTP API),
	// serf (its RPC) or memberlist (the member list the ghostwatch/gossip
	// package serves).
	AnnotationGossip = "ghostwatch.io/gossip"
	// AnnotationGossipPort is the port of that API on the pod's IP:
	// default 8500 for consul and 7373 for serf; memberlist has none.
	AnnotationGossipPort = "ghostwatch.io/gossip-port"
	// AnnotationGossipCluster names the cluster, among the pods of one
	// namespace and system: default the system's name. Set it when a
	// namespace runs more than one cluster of a system.
	AnnotationGossipCluster = "ghostwatch.io/gossip-cluster"
	// AnnotationGossipScheme is http (default) or https, for consul and
	// memberlist.
	AnnotationGossipScheme = "ghostwatch.io/gossip-scheme"
)

// defaultPort are the ports of the agents' APIs by default.
var defaultPort = map[string]uint16{"consul": 8500, "serf": 7373}

// Member is a running pod annotated as a member of a gossip cluster, as
// Watch.Agent is given it.
type Member struct {
	Namespace, Name, UID string
	// System is consul, serf or memberlist; Cluster "namespace/name".
	System, Cluster string
	// Addr is the agent's API: the pod's IP and annotated port.
	Addr netip.AddrPort
	// Scheme is http or https.
	Scheme string
}

// annotated is a running pod annotated as a member of a gossip cluster,
// as the Watch keeps it.
type annotated struct {
	uid, namespace, name string
	ip                   netip.Addr
	// since is when the pod started (created, when it does not say):
	// the oldest pod of a cluster is asked first.
	since  time.Time
	key    snapshot.GossipCluster
	scheme string
	port   uint16
	// err says why the annotations cannot be used.
	err string
}

func (p annotated) ref() string { return p.namespace + "/" + p.name }

func (p annotated) member() Member {
	return Member{Namespace: p.namespace, Name: p.name, UID: p.uid, System: p.key.System, Cluster: p.key.Cluster,
		Addr: netip.AddrPortFrom(p.ip, p.port), Scheme: p.scheme}
}

// annotatedPod returns the gossip member p is annotated as, and false when
// it is not annotated, or not running with an IP (nothing to ask).
// Annotations that cannot be used are kept with the reason (err): the
// cluster's status names the pod and the annotation rather than read as
// a cluster without pods.
func annotatedPod(p *corev1.Pod) (annotated, bool) {
	system, ok := p.Annotations[AnnotationGossip]
	if !ok || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return annotated{}, false
	}
	ip, err := netip.ParseAddr(p.Status.PodIP)
	if err != nil {
		return annotated{}, false
	}
	g := annotated{uid: string(p.UID), namespace: p.Namespace, name: p.Name, ip: ip.Unmap(), since: p.CreationTimestamp.Time}
	if p.Status.StartTime != nil {
		g.since = p.Status.StartTime.Time
	}
	cluster := cmp.Or(p.Annotations[AnnotationGossipCluster], system)
	g.key = snapshot.GossipCluster{System: system, Cluster: p.Namespace + "/" + cluster}
	g.scheme = cmp.Or(p.Annotations[AnnotationGossipScheme], "http")
	var errs []string
	switch system {
	case "consul", "serf", "memberlist":
	default:
		errs = append(errs, fmt.Sprintf("%s: %q is not consul, serf or memberlist", AnnotationGossip, system))
	}
	if g.scheme != "http" && g.scheme != "https" {
		errs = append(errs, fmt.Sprintf("%s: %q is not http or https", AnnotationGossipScheme, g.scheme))
	}
	switch s, ok := p.Annotations[AnnotationGossipPort]; {
	case ok:
		n, err := strconv.ParseUint(s, 10, 16)
		if err != nil || n == 0 {
			errs = append(errs, fmt.Sprintf("%s: %q is not a port", AnnotationGossipPort, s))
		}
		g.port = uint16(n)
	default:
		if g.port = defaultPort[system]; g.port == 0 {
			errs = append(errs, fmt.Sprintf("%s: none given, and %s has no default port", AnnotationGossipPort, system))
		}
	}
	g.err = strings.Join(errs, "; ")
	return g, true
}
