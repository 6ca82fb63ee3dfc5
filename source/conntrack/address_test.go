package conntrack

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// listTable is a Table of a fixed list.
type listTable []snapshot.Flow

func (l listTable) Dump(_ context.Context, fn func(*snapshot.Flow) error) (int, error) {
	for i := range l {
		f := l[i]
		if err := fn(&f); err != nil {
			return i, err
		}
	}
	return len(l), nil
}
func (listTable) Get(*snapshot.Flow) (snapshot.Flow, error) { return snapshot.Flow{}, errors.New("no") }
func (listTable) Delete(*snapshot.Flow) error               { return errors.New("no") }

func tcpFlow(src, dst, replySrc string) snapshot.Flow {
	s, d, r := netip.MustParseAddrPort(src), netip.MustParseAddrPort(dst), netip.MustParseAddrPort(replySrc)
	return snapshot.Flow{Proto: snapshot.ProtoTCP, State: "ESTABLISHED", Timeout: 431999,
		Orig:  snapshot.Tuple{Src: s.Addr(), SrcPort: s.Port(), Dst: d.Addr(), DstPort: d.Port()},
		Reply: snapshot.Tuple{Src: r.Addr(), SrcPort: r.Port(), Dst: s.Addr(), DstPort: s.Port()}}
}

// The flows translated to an address, addressed to it and opened by it
// are its own, each with its role; the others are not.
func TestFlowsAtAnAddress(t *testing.T) {
	table := listTable{
		tcpFlow("10.244.1.5:40000", "10.96.0.10:80", "10.244.7.47:8080"),    // through a Service to it
		tcpFlow("10.244.1.5:40001", "10.244.7.47:8080", "10.244.7.47:8080"), // straight to it
		tcpFlow("10.244.7.47:50000", "10.96.0.20:5432", "10.244.2.9:5432"),  // from it
		tcpFlow("10.244.1.5:40002", "10.96.0.10:80", "10.244.7.48:8080"),    // another backend
	}
	at, err := FlowsAt(context.Background(), table, netip.MustParseAddr("10.244.7.47"))
	if err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, f := range at.Flows {
		roles = append(roles, f.Role+" "+f.Flow)
	}
	want := []string{
		"backend tcp 10.244.1.5:40000 -> 10.96.0.10:80",
		"destination tcp 10.244.1.5:40001 -> 10.244.7.47:8080",
		"client tcp 10.244.7.47:50000 -> 10.96.0.20:5432",
	}
	if at.Read != 4 || at.Total != 3 || len(roles) != 3 || roles[0] != want[0] || roles[1] != want[1] || roles[2] != want[2] {
		t.Errorf("read %d, total %d, flows %q; want 4, 3, %q", at.Read, at.Total, roles, want)
	}
	if at.Flows[0].Remove != "conntrack -D -p tcp -s 10.244.1.5 -d 10.96.0.10 --sport 40000 --dport 80 -r 10.244.7.47" {
		t.Errorf("remove: %q", at.Flows[0].Remove)
	}
}

// The handler reads a table of its own per request and says when; a bad
// address and a table it cannot open are clear errors.
func TestAddressHandler(t *testing.T) {
	at := time.Date(2026, 11, 26, 15, 0, 0, 0, time.UTC)
	opened, closed := 0, 0
	var fail error
	h := AddressHandler("node-1", func() (Table, func(), error) {
		if fail != nil {
			return nil, nil, fail
		}
		opened++
		return listTable{tcpFlow("10.244.1.5:40000", "10.96.0.10:80", "10.244.7.47:8080")}, func() { closed++ }, nil
	}, func() time.Time { return at })
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + AddressPath + "10.244.7.47")
	if err != nil {
		t.Fatal(err)
	}
	var got AtAddress
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got.Node != "node-1" || !got.CapturedAt.Equal(at) || got.Total != 1 || opened != 1 || closed != 1 {
		t.Errorf("answer %+v, opened %d, closed %d", got, opened, closed)
	}
	fail = errors.New("reading the conntrack table needs CAP_NET_ADMIN")
	for path, code := range map[string]int{AddressPath + "10.244.7": http.StatusBadRequest, AddressPath + "10.244.7.47": http.StatusServiceUnavailable} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != code {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, code)
		}
	}
}
