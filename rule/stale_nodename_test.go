package rule

import (
	"testing"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

func TestStaleNodenameFile(t *testing.T) {
	calico := func(conf, file string, exists bool) *snapshot.CalicoNode {
		return &snapshot.CalicoNode{Config: "/etc/cni/net.d/10-calico.conflist", ConfigInUse: true, ConfNodename: conf,
			NodenameFile: "/var/lib/calico/nodename", FileExists: exists, FileNodename: file, FileModified: t0}
	}
	for _, c := range []struct {
		name string
		n    *snapshot.CalicoNode
		sev  finding.Severity // 0: no finding
		from string
	}{
		{"seed 002: a re-imaged node's nodename file names a node that exists", calico("", "10-199-0-21", true), finding.Critical, "/var/lib/calico/nodename"},
		{"a stale conflist nodename, the carrier maintainers found for calico#12257", calico("10-199-0-21", "10-199-0-105", true), finding.Critical, "nodename in /etc/cni/net.d/10-calico.conflist"},
		{"a stale name of a node that no longer exists", calico("", "old-node", true), finding.Warning, "/var/lib/calico/nodename"},
		{"the node's own name with a newline: Calico reads it as is", calico("", "10-199-0-105\n", true), finding.Warning, "/var/lib/calico/nodename"},
		{"a stale file overridden by the configuration", calico("10-199-0-105", "10-199-0-21", true), finding.Info, "/var/lib/calico/nodename, which nodename in /etc/cni/net.d/10-calico.conflist overrides"},
		{"both right", calico("", "10-199-0-105", true), 0, ""},
		{"no file, no nodename: the host name", calico("", "", false), 0, ""},
		{"an empty file: the host name", calico("", "", true), 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &snapshot.Snapshot{NodeName: "10-199-0-105", CalicoNode: c.n,
				Kube: &snapshot.Kube{Nodes: []snapshot.Node{{Name: "10-199-0-105"}, {Name: "10-199-0-21"}}}}
			fs := (&StaleNodenameFile{}).Evaluate(s)
			if c.sev == 0 {
				if len(fs) != 0 {
					t.Errorf("findings %+v", fs)
				}
				return
			}
			if len(fs) != 1 || fs[0].Severity != c.sev || fs[0].Evidence["from"] != c.from || fs[0].Subject.Node != "10-199-0-105" {
				t.Fatalf("findings %+v, want one %s from %s", fs, c.sev, c.from)
			}
		})
	}
}
