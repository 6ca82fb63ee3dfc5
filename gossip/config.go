package gossip

import (
	"math"
	"time"

	"github.com/hashicorp/memberlist"
)

// DefaultPodConfig returns memberlist's DefaultLANConfig changed for a
// cluster of pods, whose addresses Kubernetes hands to the next pod within
// seconds of the last one's death: name is this member's name (NodeName),
// label the cluster's label, the same on every member and on no other
// cluster (e.g. "<namespace>/<application>"). Every value set here says
// why; the others are DefaultLANConfig's. Bind and advertise addresses
// and ports stay the caller's: give every member the same fixed port, as
// a container port.
func DefaultPodConfig(name, label string) *memberlist.Config {
	c := memberlist.DefaultLANConfig()

	// DefaultLANConfig names the member after the host name. A pod's host
	// name is its pod name, which a StatefulSet gives to the pod's
	// successor at another address: memberlist then rejects the successor
	// ("Conflicting address for ...", state.go aliveNode) until the dead
	// member is forgotten. NodeName never repeats a name.
	c.Name = name

	// Label (memberlist v0.5.0+) is sent in front of every packet and
	// stream; a member drops those with another label, or none. A pod of
	// another cluster that inherits a member's address cannot join, nor
	// be joined by gossip meant for the dead member (memberlist#241: an
	// Alertmanager joined another namespace's cluster this way). It is
	// not a secret: with SecretKey it is also authenticated. Members with
	// different labels drop each other's traffic, so a rolling update that
	// adds or changes the label runs two clusters, the old pods' and the
	// new ones', until the last old pod is gone. (SkipInboundLabelCheck is
	// no way around it: it is for transports that check labels
	// themselves, and makes memberlist refuse labelled traffic.)
	c.Label = label

	// GossipToTheDeadTime (default 30s) is how long a dead member is
	// still gossiped to, so that a member wrongly declared dead hears it
	// and refutes; it is also the least time a dead or left member stays
	// in the list, and memberlist forgets it at the next full probe round
	// after that (state.go resetNodes). A pod named by NodeName never
	// comes back after it dies, and a live one wrongly declared dead
	// rejoins by its own push/pull; meanwhile the dead member's address,
	// which may be another pod's already, keeps getting its gossip.
	// 15s is DefaultLocalConfig's value.
	c.GossipToTheDeadTime = 15 * time.Second

	// PushPullInterval (default 30s) must not exceed GossipToTheDeadTime:
	// a member that forgets a dead member before every push/pull told the
	// others it is dead gets it back as alive from a member that still
	// thinks so, and the ghost walks again until probed dead once more
	// (DefaultLANConfig keeps the two equal for this). A push/pull is a
	// full state exchange with one member over TCP: cheap for the tens of
	// members of a workload's cluster; memberlist stretches the interval
	// itself above 32 members.
	c.PushPullInterval = 15 * time.Second

	// DeadNodeReclaimTime (default 0, kept) is how long a member must
	// have been dead before its name is accepted from another address;
	// 0 never. A left member's name is accepted from anywhere at once
	// (state.go aliveNode). Names from NodeName never move to another
	// address, so a name arriving from a second address is two processes
	// configured alike, or an impostor: memberlist refuses it and logs
	// "Conflicting address for", rather than hand the identity over.
	// Applications that keep stable names (StatefulSet pod names) would
	// want a few seconds here; they get the rejection above until the
	// dead member is forgotten.
	c.DeadNodeReclaimTime = 0

	// SuspicionMult (default 4, kept): a member that stops answering is
	// suspect for SuspicionMult * max(1, log10(members)) * ProbeInterval
	// (4s up to 10 members) when enough others confirm, before it is
	// declared dead. Lower, and a pod whose CPU is throttled misses acks
	// and is declared dead while alive; it refutes, but every member sees
	// it leave and join (NotifyLeave, NotifyJoin), and a hash ring moves.
	c.SuspicionMult = 4

	// SuspicionMaxTimeoutMult (default 6): without confirmations from
	// other members, suspicion lasts up to this times as long (24s up to
	// 10 members). While suspect, the member is still in Members(), so
	// applications still send it traffic, to an address Kubernetes may
	// have reissued already. 3 bounds that at 12s; it gives a suspecting
	// member that is itself degraded fewer chances to recover before it
	// declares a live member dead, which then refutes.
	c.SuspicionMaxTimeoutMult = 3

	return c
}

// Timing is how long memberlist keeps a member that stopped without
// leaving, computed as memberlist v0.5 does (util.go suspicionTimeout,
// state.go suspectNode and resetNodes) for a cluster of a given size.
type Timing struct {
	// SuspectMin is how long a member is suspect before it is declared
	// dead, once enough members confirm the suspicion; SuspectMax without
	// confirmations. They are equal below SuspicionMult members, where
	// memberlist expects no confirmations.
	SuspectMin, SuspectMax time.Duration
	// DeadMin is the least time a dead or left member is kept, still
	// listed and gossiped to; DeadMax the most, once the probe round that
	// forgets it comes (on a member meeting its own deadlines: memberlist
	// stretches ProbeInterval up to AwarenessMaxMultiplier times on one
	// that does not).
	DeadMin, DeadMax time.Duration
}

// TimingOf computes Timing for a cluster of members members (counting
// dead ones not yet forgotten, as memberlist does).
func TimingOf(c *memberlist.Config, members int) Timing {
	scale := math.Max(1, math.Log10(math.Max(1, float64(members))))
	min := time.Duration(c.SuspicionMult) * time.Duration(scale*1000) * c.ProbeInterval / 1000
	max := time.Duration(c.SuspicionMaxTimeoutMult) * min
	if members-2 < c.SuspicionMult-2 {
		max = min
	}
	return Timing{
		SuspectMin: min,
		SuspectMax: max,
		DeadMin:    c.GossipToTheDeadTime,
		DeadMax:    c.GossipToTheDeadTime + time.Duration(members)*c.ProbeInterval,
	}
}
