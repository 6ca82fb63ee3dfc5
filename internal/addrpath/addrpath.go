// Package addrpath serves what a ghostwatch process says of one address:
// GET PREFIX+ADDRESS answered as JSON, on the loopback listeners
// `ghostwatch ip` and `ghostwatch collect` reach by port-forward. It
// knows no ledger: each answer is its caller's.
package addrpath

import (
	"context"
	"encoding/json"
	"net/http"
	"net/netip"
	"strings"
)

// Handler answers GET prefix+ADDRESS with what answer returns for the
// address (IPv4-mapped addresses unmapped) as JSON: 400 when the path
// holds no address, 503 with the error when answer fails, 405 for
// anything but GET.
func Handler(prefix string, answer func(ctx context.Context, ip netip.Addr) (any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(w, "GET only", http.StatusMethodNotAllowed)
			return
		}
		ip, err := netip.ParseAddr(strings.TrimPrefix(r.URL.Path, prefix))
		if err != nil {
			http.Error(w, "not an IP address: "+err.Error(), http.StatusBadRequest)
			return
		}
		v, err := answer(r.Context(), ip.Unmap())
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	})
}
