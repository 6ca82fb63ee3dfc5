package conntrack

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"time"

	"github.com/ghostwatch/ghostwatch/internal/addrpath"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// AddressPath is where AddressHandler answers: AddressPath + the address.
const AddressPath = "/v1/flows/"

// MaxAddressFlows is the most flows an answer lists; Total counts them all.
const MaxAddressFlows = 1000

// AtAddress is what a node's table holds for one address: the flows
// translated to it (it is their backend), those addressed to it, and those
// it opened.
type AtAddress struct {
	Node       string    `json:"node"`
	IP         string    `json:"ip"`
	CapturedAt time.Time `json:"capturedAt"`
	// Read is how many entries the table held; Total how many of them
	// concern the address, of which Flows lists the first MaxAddressFlows.
	Read  int           `json:"read"`
	Total int           `json:"total"`
	Flows []AddressFlow `json:"flows"`
}

// AddressFlow is one flow as an answer lists it.
type AddressFlow struct {
	// Role says how the flow concerns the address: "backend" (translated
	// to it), "destination" (addressed to it, not translated) or "client"
	// (opened by it).
	Role    string `json:"role"`
	Flow    string `json:"flow"`
	Backend string `json:"backend"`
	State   string `json:"state,omitempty"`
	ID      uint32 `json:"conntrackId,omitempty"`
	Timeout uint32 `json:"timeoutSeconds"`
	Started string `json:"started,omitempty"`
	Remove  string `json:"remove"`
}

// FlowsAt reads the whole table t once and returns what it holds for ip.
func FlowsAt(ctx context.Context, t Table, ip netip.Addr) (AtAddress, error) {
	ip = ip.Unmap()
	at := AtAddress{IP: ip.String(), Flows: []AddressFlow{}}
	n, err := t.Dump(ctx, func(f *snapshot.Flow) error {
		role := ""
		switch {
		case f.Reply.Src.Unmap() == ip && f.DNAT():
			role = "backend"
		case f.Orig.Dst.Unmap() == ip:
			role = "destination"
		case f.Orig.Src.Unmap() == ip:
			role = "client"
		default:
			return nil
		}
		at.Total++
		if len(at.Flows) < MaxAddressFlows {
			af := AddressFlow{Role: role, Flow: f.String(), Backend: f.Backend().String(), State: f.State, ID: f.ID, Timeout: f.Timeout, Remove: f.DeleteCommand()}
			if !f.Start.IsZero() {
				af.Started = f.Start.UTC().Format(time.RFC3339)
			}
			at.Flows = append(at.Flows, af)
		}
		return nil
	})
	at.Read = n
	return at, err
}

// AddressHandler answers GET AddressPath+ADDRESS with what node's table
// holds for the address, as JSON, read afresh from a table open gives
// (and closes) for the request alone.
func AddressHandler(node string, open func() (Table, func(), error), now func() time.Time) http.Handler {
	return addrpath.Handler(AddressPath, func(ctx context.Context, ip netip.Addr) (any, error) {
		t, done, err := open()
		if err != nil {
			return nil, fmt.Errorf("conntrack: %w", err)
		}
		defer done()
		captured := now()
		at, err := FlowsAt(ctx, t, ip)
		if err != nil {
			return nil, fmt.Errorf("reading the conntrack table: %w", err)
		}
		at.Node, at.CapturedAt = node, captured.UTC()
		return at, nil
	})
}
