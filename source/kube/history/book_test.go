package history

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

var t0 = time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)

func pod(name, uid, node string, start time.Time, ips ...string) *snapshot.Pod {
	p := &snapshot.Pod{Namespace: "shop", Name: name, UID: uid, Node: node, Phase: snapshot.PodRunning, StartTime: start, Created: start}
	for _, ip := range ips {
		p.IPs = append(p.IPs, netip.MustParseAddr(ip))
	}
	return p
}

func ended(p *snapshot.Pod, phase string) *snapshot.Pod {
	q := *p
	q.Phase = phase
	return &q
}

// summary is a tenure as the tests compare it.
func summary(ts []Tenure) []string {
	var out []string
	for _, t := range ts {
		s := fmt.Sprintf("%s/%s %s %s from %s", t.Namespace, t.Pod, t.UID, t.Node, t.From.Format("15:04"))
		if !t.Holding() {
			s += fmt.Sprintf(" until %s %s", t.Until.Format("15:04"), t.Ended)
			if t.Reason != "" {
				s += " (" + t.Reason + ")"
			}
		}
		out = append(out, s)
	}
	return out
}

func TestBookKeepsEachAddressesTenures(t *testing.T) {
	ip := netip.MustParseAddr("10.244.3.47")
	a := pod("web-a", "uid-a", "node-1", t0, "10.244.3.47")
	b := pod("web-b", "uid-b", "node-1", t0.Add(10*time.Minute), "10.244.3.47")
	c := pod("web-c", "uid-c", "node-2", t0.Add(20*time.Minute), "10.244.3.47", "fd00::47")
	for _, tc := range []struct {
		name string
		play func(b *Book)
		want []string
	}{
		{"three pods in turn, each ending its own way", func(bk *Book) {
			bk.Set(nil, a, "", t0)
			bk.Delete(a, false, t0.Add(5*time.Minute))
			bk.Set(nil, b, "", t0.Add(10*time.Minute))
			bk.Set(b, ended(b, snapshot.PodFailed), "Evicted", t0.Add(15*time.Minute))
			bk.Delete(ended(b, snapshot.PodFailed), false, t0.Add(16*time.Minute))
			bk.Set(nil, c, "", t0.Add(20*time.Minute))
		}, []string{
			"shop/web-a uid-a node-1 from 10:00 until 10:05 deleted",
			"shop/web-b uid-b node-1 from 10:10 until 10:15 failed (Evicted)",
			"shop/web-c uid-c node-2 from 10:20",
		}},
		{"listed out of order, a deletion the watch missed", func(bk *Book) {
			bk.Set(nil, c, "", t0.Add(30*time.Minute))
			bk.Set(nil, a, "", t0.Add(30*time.Minute))
			bk.Delete(a, true, t0.Add(31*time.Minute))
		}, []string{
			"shop/web-a uid-a node-1 from 10:00 until 10:31 deleted-unseen",
			"shop/web-c uid-c node-2 from 10:20",
		}},
		{"a pod that reports another address", func(bk *Book) {
			bk.Set(nil, a, "", t0)
			moved := pod("web-a", "uid-a", "node-1", t0, "10.244.3.48")
			bk.Set(a, moved, "", t0.Add(time.Minute))
		}, []string{"shop/web-a uid-a node-1 from 10:00 until 10:01 readdressed"}},
		{"a hostNetwork pod reports its node's address: not recorded", func(bk *Book) {
			h := pod("node-exporter", "uid-h", "node-1", t0, "10.244.3.47")
			h.HostNetwork = true
			bk.Set(nil, h, "", t0)
		}, nil},
		{"an update or a second deletion changes nothing", func(bk *Book) {
			bk.Set(nil, a, "", t0)
			bk.Set(a, a, "", t0.Add(time.Minute))
			bk.Set(nil, ended(a, snapshot.PodSucceeded), "", t0.Add(2*time.Minute))
			bk.Delete(a, false, t0.Add(3*time.Minute))
			bk.Delete(a, true, t0.Add(4*time.Minute))
		}, []string{"shop/web-a uid-a node-1 from 10:00 until 10:02 succeeded"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bk := NewBook(Limits{}, t0)
			tc.play(bk)
			got := summary(bk.Of(ip))
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("tenures of %s:\n got %q\nwant %q", ip, got, tc.want)
			}
		})
	}
}

// An address's limit drops its oldest ended tenures, never a pod that
// holds it; the book's limit on ended tenures drops those that ended first,
// wherever they are.
func TestBookIsBounded(t *testing.T) {
	ip := netip.MustParseAddr("10.244.3.47")
	bk := NewBook(Limits{PerAddress: 3, Ended: 4}, t0)
	holder := pod("db-0", "uid-db", "node-1", t0, "10.244.3.47")
	bk.Set(nil, holder, "", t0) // a duplicate holder throughout
	for i := range 5 {
		p := pod(fmt.Sprintf("web-%d", i), fmt.Sprintf("uid-%d", i), "node-1", t0.Add(time.Duration(i+1)*time.Minute), "10.244.3.47")
		bk.Set(nil, p, "", p.StartTime)
		bk.Delete(p, false, p.StartTime.Add(30*time.Second))
	}
	if got, want := summary(bk.Of(ip)), []string{
		"shop/db-0 uid-db node-1 from 10:00",
		"shop/web-3 uid-3 node-1 from 10:04 until 10:04 deleted",
		"shop/web-4 uid-4 node-1 from 10:05 until 10:05 deleted",
	}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("per address:\n got %q\nwant %q", got, want)
	}
	for i := range 6 {
		p := pod(fmt.Sprintf("api-%d", i), fmt.Sprintf("uid-api-%d", i), "node-2", t0, fmt.Sprintf("10.244.4.%d", i))
		bk.Set(nil, p, "", t0)
		bk.Delete(p, false, t0.Add(time.Duration(i)*time.Minute))
	}
	addresses, tenures, nEnded := bk.Len()
	if nEnded != 4 || tenures != 5 || addresses != 5 {
		t.Errorf("%d addresses, %d tenures, %d ended; want the holder and the 4 that ended last", addresses, tenures, nEnded)
	}
	for i := range 6 {
		ip := netip.MustParseAddr(fmt.Sprintf("10.244.4.%d", i))
		if kept, want := len(bk.Of(ip)) == 1, i >= 2; kept != want {
			t.Errorf("%s kept %t, want %t", ip, kept, want)
		}
	}
	if len(bk.Of(ip)) != 1 {
		t.Errorf("10.244.3.47: %q, want the holder alone", summary(bk.Of(ip)))
	}
}
