package history

import (
	"encoding/json"
	"net/http"
	"net/netip"
	"time"
)

// Path is where Handler answers: Path + the address.
const Path = "/v1/ip/"

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
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(rw, "GET only", http.StatusMethodNotAllowed)
			return
		}
		ip, err := netip.ParseAddr(r.URL.Path[len(Path):])
		if err != nil {
			http.Error(rw, "not an IP address: "+err.Error(), http.StatusBadRequest)
			return
		}
		book := w.Book()
		if book == nil {
			http.Error(rw, "the address history has not started", http.StatusServiceUnavailable)
			return
		}
		a := Answer{IP: ip.Unmap(), Replica: replica, Since: book.Since().UTC(), Tenures: book.Of(ip.Unmap())}
		if err := w.Ready(); err != nil {
			a.NotReady = err.Error()
		}
		rw.Header().Set("Content-Type", "application/json")
		json.NewEncoder(rw).Encode(a)
	})
}
