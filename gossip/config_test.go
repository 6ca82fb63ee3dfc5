package gossip

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// TestDefaultPodConfig pins what the preset changes from DefaultLANConfig,
// so that a value changed without its reason beside it fails here.
func TestDefaultPodConfig(t *testing.T) {
	got := DefaultPodConfig("cache-0-3f2a1b9c", "shop/cache")
	lan := memberlist.DefaultLANConfig()
	want := map[string]any{
		"Name":                    "cache-0-3f2a1b9c",
		"Label":                   "shop/cache",
		"GossipToTheDeadTime":     15 * time.Second,
		"PushPullInterval":        15 * time.Second,
		"SuspicionMaxTimeoutMult": 3,
	}
	g, l := reflect.ValueOf(got).Elem(), reflect.ValueOf(lan).Elem()
	var changed []string
	for i := range g.NumField() {
		f := g.Type().Field(i).Name
		if reflect.DeepEqual(g.Field(i).Interface(), l.Field(i).Interface()) {
			continue
		}
		changed = append(changed, f)
		if w, ok := want[f]; !ok {
			t.Errorf("%s = %v, changed from DefaultLANConfig's %v without being listed here", f, g.Field(i), l.Field(i))
		} else if !reflect.DeepEqual(g.Field(i).Interface(), w) {
			t.Errorf("%s = %v, want %v", f, g.Field(i), w)
		}
	}
	for f := range want {
		if !slices.Contains(changed, f) {
			t.Errorf("%s is DefaultLANConfig's %v, want %v", f, g.FieldByName(f), want[f])
		}
	}
	// Kept on purpose, with a reason: pinned too.
	if got.DeadNodeReclaimTime != 0 || got.SuspicionMult != 4 {
		t.Errorf("DeadNodeReclaimTime %v, SuspicionMult %d; want 0 and 4", got.DeadNodeReclaimTime, got.SuspicionMult)
	}
	if got.PushPullInterval > got.GossipToTheDeadTime {
		t.Errorf("PushPullInterval %v exceeds GossipToTheDeadTime %v: forgotten dead members come back from push/pulls", got.PushPullInterval, got.GossipToTheDeadTime)
	}
}

func TestTimingOf(t *testing.T) {
	pod := DefaultPodConfig("a", "l")
	lan := memberlist.DefaultLANConfig()
	for _, tc := range []struct {
		name    string
		cfg     *memberlist.Config
		members int
		want    Timing
	}{
		{"preset, 3 members: too few to confirm, the minimum", pod, 3, Timing{4 * time.Second, 4 * time.Second, 15 * time.Second, 18 * time.Second}},
		{"preset, 4 members: SuspicionMult-2 confirmations wanted", pod, 4, Timing{4 * time.Second, 12 * time.Second, 15 * time.Second, 19 * time.Second}},
		{"preset, 10 members: log10 is 1", pod, 10, Timing{4 * time.Second, 12 * time.Second, 15 * time.Second, 25 * time.Second}},
		{"preset, 100 members: twice as long", pod, 100, Timing{8 * time.Second, 24 * time.Second, 15 * time.Second, 115 * time.Second}},
		{"DefaultLANConfig, 5 members", lan, 5, Timing{4 * time.Second, 24 * time.Second, 30 * time.Second, 35 * time.Second}},
		{"one member", pod, 1, Timing{4 * time.Second, 4 * time.Second, 15 * time.Second, 16 * time.Second}},
		{"the tests' configuration, 4 members", testConfig("a", "l"), 4, Timing{800 * time.Millisecond, 2400 * time.Millisecond, 3 * time.Second, 3800 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := TimingOf(tc.cfg, tc.members); got != tc.want {
				t.Errorf("TimingOf(%d members) = %+v, want %+v", tc.members, got, tc.want)
			}
		})
	}
}
