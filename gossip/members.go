package gossip

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// The member list View serves, version 1. ghostwatch reads it (its
// source/gossip parser), detected by Kind; a change that breaks readers of
// version 1 takes a new version.
const (
	Kind    = "ghostwatch.io/memberlist-members"
	Version = 1
	// Path is where ghostwatch asks for the member list, on the port the
	// pod's ghostwatch.io/gossip-port annotation gives.
	Path = "/ghostwatch/members"
)

// Member states, memberlist's.
const (
	StateAlive   = "alive"
	StateSuspect = "suspect"
	StateDead    = "dead"
	StateLeft    = "left"
)

// MemberList is one member's view of its cluster, as View serves it.
type MemberList struct {
	Kind    string `json:"kind"`
	Version int    `json:"version"`
	// Label is the cluster's memberlist label; "" when it has none.
	Label string `json:"label"`
	// Local names the member whose view this is.
	Local   string   `json:"local"`
	Members []Member `json:"members"`
	// Rejections counts, by reason (RejectLabel, ...), the messages the
	// local member refused since it started; left out when none. An
	// optional field: readers of version 1 that do not know it ignore it.
	Rejections map[string]uint64 `json:"rejections,omitempty"`
}

// Member is one member of the cluster as the local member sees it.
type Member struct {
	Name string `json:"name"`
	Addr string `json:"addr"`
	Port uint16 `json:"port"`
	// State is alive, suspect, dead or left.
	State       string `json:"state"`
	Incarnation uint32 `json:"incarnation"`
	// Meta is the member's node metadata (base64 in JSON); left out when
	// empty.
	Meta []byte `json:"meta,omitempty"`
	// Since is when the local member saw the member join (alive) or go
	// (dead, left), RFC 3339; left out when unknown: for suspect members
	// (memberlist does not tell when it suspects one), and for members
	// that joined or went before the View was installed. A suspicion that
	// was refuted does not move an alive member's Since.
	Since string `json:"since,omitempty"`
}

// View is the local member's view of its memberlist cluster, served over
// HTTP as a MemberList. The states, incarnations, addresses and metadata
// come from the member itself, asked the way a peer asks for a push/pull:
// memberlist tells applications neither which members are suspect nor
// whether a gone member died or left. Dead and left members are listed
// until memberlist forgets them (GossipToTheDeadTime, then the next probe
// round: see Timing). The View itself only records when each member
// joined or went, from memberlist's events. It forgets when a member went
// once a Read finds memberlist has forgotten the member, and in any case
// ten times GossipToTheDeadTime (at least ten minutes) after: it remembers
// the live members and the recently gone ones, however long nobody reads
// it.
type View struct {
	cfg  *memberlist.Config
	next memberlist.EventDelegate
	now  func() time.Time
	rej  *Rejections

	mu     sync.Mutex
	events map[string]event
}

// event is the last join or leave memberlist notified for a member.
type event struct {
	gone bool
	at   time.Time
}

// keepGone bounds how long the View remembers when a member went, should
// nobody read the View to learn that memberlist forgot it: the View's
// memory is then the live members plus the members gone in the last
// keepGone.
func keepGone(c *memberlist.Config) time.Duration {
	return max(10*c.GossipToTheDeadTime, 10*time.Minute)
}

// Watch returns the View of the member c configures. Call it before
// memberlist.Create(c), after setting c.Events and c.LogOutput (or
// c.Logger): the View takes c.Events' place and passes every event on to
// it, and counts the member's rejections from its log (CountRejections),
// which goes where c sent it. The View reads c for the label, keys,
// transport and timeouts when it asks the member for its state.
func Watch(c *memberlist.Config) *View {
	v := &View{cfg: c, next: c.Events, now: time.Now, events: map[string]event{}, rej: CountRejections(c)}
	c.Events = v
	return v
}

// NotifyJoin records that the member joined (memberlist.EventDelegate).
func (v *View) NotifyJoin(n *memberlist.Node) {
	v.record(n.Name, false)
	if v.next != nil {
		v.next.NotifyJoin(n)
	}
}

// NotifyLeave records that the member went, dead or left
// (memberlist.EventDelegate).
func (v *View) NotifyLeave(n *memberlist.Node) {
	v.record(n.Name, true)
	if v.next != nil {
		v.next.NotifyLeave(n)
	}
}

// NotifyUpdate passes the event on: a member whose metadata changed keeps
// its state (memberlist.EventDelegate).
func (v *View) NotifyUpdate(n *memberlist.Node) {
	if v.next != nil {
		v.next.NotifyUpdate(n)
	}
}

// record is called by memberlist with its member lock held: it must not
// call memberlist, nor wait.
func (v *View) record(name string, gone bool) {
	now := v.now()
	v.mu.Lock()
	defer v.mu.Unlock()
	v.events[name] = event{gone: gone, at: now}
	for n, e := range v.events {
		if e.gone && now.Sub(e.at) > keepGone(v.cfg) {
			delete(v.events, n)
		}
	}
}

// Read asks the local member ml for its view of the cluster.
func (v *View) Read(ctx context.Context, ml *memberlist.Memberlist) (*MemberList, error) {
	local := ml.LocalNode()
	nodes, err := readState(ctx, v.cfg, local.Address())
	if err != nil {
		return nil, fmt.Errorf("reading the member list of %s from its push/pull at %s: %w", local.Name, local.Address(), err)
	}
	l := &MemberList{Kind: Kind, Version: Version, Label: v.cfg.Label, Local: local.Name, Members: make([]Member, 0, len(nodes))}
	v.mu.Lock()
	defer v.mu.Unlock()
	listed := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		state, ok := stateNames[n.State]
		if !ok {
			return nil, fmt.Errorf("member %s of %s's list is in state %d, which this package does not know (memberlist's are 0 to 3)", n.Name, local.Name, n.State)
		}
		a, ok := netip.AddrFromSlice(n.Addr)
		if !ok {
			return nil, fmt.Errorf("member %s of %s's list has an address of %d bytes", n.Name, local.Name, len(n.Addr))
		}
		m := Member{Name: n.Name, Addr: a.Unmap().String(), Port: n.Port, State: state, Incarnation: n.Incarnation}
		if len(n.Meta) > 0 {
			m.Meta = n.Meta
		}
		if e, ok := v.events[n.Name]; ok && e.gone == (state == StateDead || state == StateLeft) && state != StateSuspect {
			m.Since = e.at.UTC().Format(time.RFC3339)
		}
		listed[n.Name] = true
		l.Members = append(l.Members, m)
	}
	for n, e := range v.events {
		if e.gone && !listed[n] {
			delete(v.events, n)
		}
	}
	slices.SortFunc(l.Members, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	l.Rejections = v.rej.Counts()
	return l, nil
}

var stateNames = map[memberlist.NodeStateType]string{
	memberlist.StateAlive:   StateAlive,
	memberlist.StateSuspect: StateSuspect,
	memberlist.StateDead:    StateDead,
	memberlist.StateLeft:    StateLeft,
}

// readTimeout bounds one Read by the handler.
const readTimeout = 5 * time.Second

// Handler serves ml's MemberList as JSON to GET (and HEAD); 503 with the
// reason when the member cannot be read (it has shut down), 405 to other
// methods. Mount it at Path on a port named by the pod's
// ghostwatch.io/gossip-port annotation.
func (v *View) Handler(ml *memberlist.Memberlist) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, fmt.Sprintf("%s: the member list is read with GET", r.Method), http.StatusMethodNotAllowed)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
		defer cancel()
		l, err := v.Read(ctx, ml)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		body, err := json.Marshal(l)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if r.Method == http.MethodHead {
			return
		}
		_, _ = w.Write(append(body, '\n'))
	})
}
