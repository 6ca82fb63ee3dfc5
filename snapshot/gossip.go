package snapshot

import (
	"net/netip"
	"time"
)

// Gossip is what gossip clusters (Consul, Serf, memberlist) say of their
// members, each as one member of the cluster sees it.
type Gossip struct {
	Views []GossipView
	// Undeclared names the clusters pods are annotated as members of
	// that the operator did not declare: not read, so not judged.
	Undeclared []string
	// APIClock is the API server's clock as the reader of the views
	// measured it, against the clock it stamped the members' Listed
	// times on: saved with the views (a bundle's, as the controller's
	// leader read them), it lets a later reader compare those times with
	// the pods' creation as the reader did. Zero when not measured.
	APIClock Clock `json:",omitzero"`
}

// GossipView is one member's view of its cluster: consul members, serf
// members, or the member list the ghostwatch/gossip package serves.
type GossipView struct {
	// System is "consul", "serf" or "memberlist".
	System string
	// From says where the view was read: a file (and line), an endpoint.
	From string
	// Label is memberlist's cluster label, when the view says it.
	Label string
	// Cluster names the cluster the view belongs to when the reader knows
	// it: the controller's "namespace/name" of the pods it was read from
	// (see the ghostwatch.io/gossip annotations); "" for files and flags.
	Cluster string
	// Local names the member whose view this is, when the view says it.
	Local   string
	Members []GossipMember
	// Unread, when set, says why the view could not be read again: it is
	// the last one read (without members when none ever was). The
	// controller judges a cluster it cannot read on its last view rather
	// than read "no ghost" into one cluster's outage; nothing is acted on
	// without reading it again.
	Unread string
	// Clock is the clock of the agent that gave the view, as the reader
	// measured it: its members' Since are on it.
	Clock Clock
	// Rejections counts, by reason, the messages the local member refused
	// since it started, when the view says so (the ghostwatch/gossip
	// package's member list); nil when unknown. Consul and Serf do not
	// tell.
	Rejections map[string]uint64
}

// Member states, as the rules read them: the systems' own words mapped to
// these (Consul's 1-4, Serf's and memberlist's strings).
const (
	MemberAlive   = "alive"
	MemberLeaving = "leaving"
	MemberLeft    = "left"
	MemberFailed  = "failed"
	MemberSuspect = "suspect"
	MemberDead    = "dead"
)

// GossipMember is one member of a gossip cluster.
type GossipMember struct {
	Name string
	Addr netip.Addr
	Port uint16
	// Status is one of the Member* states; RawStatus is the system's own
	// word for it.
	Status, RawStatus string
	Tags              map[string]string
	// Incarnation is memberlist's incarnation number; 0 when unknown.
	Incarnation uint32
	// Since is when the view last saw the member's state change, on the
	// view's Clock; zero when unknown.
	Since time.Time
	// Listed is, for a member whose view gives no Since, the first time
	// ghostwatch itself read the member listed, on its own clock (in any state) in its
	// cluster's views: the member had joined by then, so its process
	// started before. Zero when unknown (Consul and Serf do not say when a
	// member joined or went; files are read once).
	Listed time.Time
}

// Gone reports whether the member is failed, dead or left: a ghost when
// its address now belongs to someone else.
func (m *GossipMember) Gone() bool {
	switch m.Status {
	case MemberLeft, MemberFailed, MemberDead:
		return true
	}
	return false
}

// Live reports whether the member is alive, suspect or leaving: the
// cluster still exchanges messages with it.
func (m *GossipMember) Live() bool { return !m.Gone() }
