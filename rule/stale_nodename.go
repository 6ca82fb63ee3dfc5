package rule

import (
	"fmt"
	"strings"
	"time"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// StaleNodenameFileID is the stable ID of the stale-nodename-file rule.
const StaleNodenameFileID = "stale-nodename-file"

// StaleNodenameFile finds a node whose Calico CNI plugin books pod
// addresses under another node's name: the "nodename" of its CNI
// configuration, or, when that is empty, the content of its nodename file
// (/var/lib/calico/nodename), names another node than the one the node
// agent runs on. Every address booked there carries the wrong node; when
// that node exists, Calico's leak collector takes the pods for rescheduled
// and frees their addresses after leakGracePeriod while they run, and the
// next pods get them (calico#12257): critical. When no such node exists,
// the collector keeps them, but the bookings are still wrong: a warning.
// A stale file that the configuration's nodename overrides is reported as
// info: it bites as soon as the configuration loses that field.
type StaleNodenameFile struct{}

// KubeKinds says the rule reads Nodes only (snapshot.KindReader).
func (*StaleNodenameFile) KubeKinds() []string { return []string{"Node"} }

// Info describes the rule.
func (*StaleNodenameFile) Info() Info {
	return Info{
		ID:      StaleNodenameFileID,
		Sources: []string{"kube", "calico-node"},
		Scope:   ScopeNode,
		Columns: []string{"node"},
		Detail: func(f finding.Finding) string {
			return fmt.Sprintf("books under %q (%v)", f.Evidence["booked_as"], f.Evidence["from"])
		},
		Summary: "Calico's CNI plugin on this node books pod addresses under another node's name: its leak collector later frees them while the pods run",
		Fix:     "write this node's name into the file (or the CNI configuration's nodename), then re-create the pods booked under the wrong name before leakGracePeriod ends",
		Runbook: "docs/runbooks/stale-nodename-file.md",
	}
}

// Evaluate returns at most one finding: the name the plugin books under,
// when it is not this node's.
func (r *StaleNodenameFile) Evaluate(s *snapshot.Snapshot) []finding.Finding {
	n := s.CalicoNode
	if n == nil || s.Kube == nil || s.NodeName == "" {
		return nil
	}
	exists := func(name string) bool {
		for i := range s.Kube.Nodes {
			if s.Kube.Nodes[i].Name == name {
				return true
			}
		}
		return false
	}
	ev := map[string]any{"config": n.Config, "config_in_use": n.ConfigInUse, "nodename_file": n.NodenameFile}
	var booked, from string
	sev := finding.Warning
	switch {
	case n.ConfNodename != "" && n.ConfNodename != s.NodeName:
		booked, from = n.ConfNodename, "nodename in "+n.Config
	case n.ConfNodename != "" && n.FileExists && n.FileNodename != "" && n.FileNodename != s.NodeName:
		// Overridden today.
		booked, from, sev = n.FileNodename, n.NodenameFile+", which nodename in "+n.Config+" overrides", finding.Info
	case n.ConfNodename == "" && n.FileExists && n.FileNodename != "" && n.FileNodename != s.NodeName:
		booked, from = n.FileNodename, n.NodenameFile
	default:
		return nil
	}
	ev["booked_as"], ev["from"] = booked, from
	if n.FileExists {
		ev["file_modified"] = n.FileModified.UTC().Format(time.RFC3339)
	}
	var why string
	trimmed := strings.TrimSpace(booked)
	switch {
	case trimmed == s.NodeName:
		why = fmt.Sprintf("the name is this node's with white space around it (%q): Calico reads it as is, and no node has that name", booked)
	case exists(booked) && sev != finding.Info:
		sev = finding.Critical
		why = fmt.Sprintf("node %s exists, so Calico's leak collector takes the pods booked under it for rescheduled and frees their addresses after leakGracePeriod while they run", booked)
	case exists(booked):
		why = fmt.Sprintf("node %s exists: once the override goes, its leak collector frees the pods' addresses while they run", booked)
	default:
		why = fmt.Sprintf("no node %s exists, so the leak collector keeps the bookings, but every one names the wrong node", booked)
	}
	ev["booked_node_exists"] = exists(booked)
	if !n.ConfigInUse {
		ev["note"] = n.Config + " is not the first CNI configuration by name: the kubelet may use another one"
	}
	return []finding.Finding{{
		Rule:     StaleNodenameFileID,
		Severity: sev,
		Message: fmt.Sprintf("Calico's CNI plugin on node %s books pod addresses under node name %q, from %s: %s",
			s.NodeName, booked, from, why),
		Subject:  finding.Subject{Node: s.NodeName},
		Evidence: ev,
		Concerns: []finding.ObjectRef{{Kind: "Node", Name: s.NodeName}},
	}}
}
