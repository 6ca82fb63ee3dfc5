package history

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"time"

	"github.com/ghostwatch/ghostwatch/internal/addrpath"
)

// Path is where Handler answers: Path + the address; AllPath the whole
// book.
const (
	Path    = "/v1/ip/"
	AllPath = "/v1/history"
)

// Answer is what a replica knows of one address.
type Answer struct {
	IP netip.Addr `json:"ip"`
	// Replica names the controller replica that answered.
	Replica string `json:"replica"`
	// Since is when its book started: a pod gone before then is not in
	// it.
	Since time.Time `json:"since"`
	// NotReady says why its book is not complete (its first list not
	// done, its watch failing); "" when it is.
	NotReady string   `json:"notReady,omitempty"`
	Tenures  []Tenure `json:"tenures"`
}

// Handler answers GET Path+ADDRESS with the Answer of w's book as JSON.
// replica names this process.
func Handler(w *Watch, replica string) http.Handler {
	return addrpath.Handler(Path, func(_ context.Context, ip netip.Addr) (any, error) {
		book := w.Book()
		if book == nil {
			return nil, errors.New("the address history has not started")
		}
		a := Answer{IP: ip, Replica: replica, Since: book.Since().UTC(), Tenures: book.Of(ip)}
		if err := w.Ready(); err != nil {
			a.NotReady = err.Error()
		}
		return a, nil
	})
}

// AllHandler answers GET AllPath with the whole book as an Answer of
// every address (IP unset), streamed: one tenure at a time, however many.
func AllHandler(w *Watch, replica string) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(rw, "GET only", http.StatusMethodNotAllowed)
			return
		}
		book := w.Book()
		if book == nil {
			http.Error(rw, "the address history has not started", http.StatusServiceUnavailable)
			return
		}
		head := Answer{Replica: replica, Since: book.Since().UTC(), Tenures: []Tenure{}}
		if err := w.Ready(); err != nil {
			head.NotReady = err.Error()
		}
		rw.Header().Set("Content-Type", "application/json")
		b, _ := json.Marshal(head)
		// The head's fields up to its empty list of tenures, then the
		// tenures one by one.
		rw.Write(b[:len(b)-len(`]}`)])
		first := true
		enc := json.NewEncoder(rw)
		book.Each(func(t Tenure) {
			if !first {
				rw.Write([]byte{','})
			}
			first = false
			enc.Encode(t)
		})
		rw.Write([]byte("]}\n"))
	})
}
