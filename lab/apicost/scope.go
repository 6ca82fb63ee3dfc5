package apicost

import (
	"net/url"

	"k8s.io/apimachinery/pkg/fields"

	"github.com/ghostwatch/ghostwatch/source/kube/live"
)

// ScopeViolations returns the requests in reqs that read beyond one node:
// a list or watch of pods whose field selector does not pin spec.nodeName,
// and a list or watch of nodes whose field selector does not pin
// metadata.name. A list (not a watch) of pods pinning status.podIP is in
// scope: the agent is to look pods up by address now and then, as the
// API server answers from an index; so is a list of every pod in pages
// by the look-ups' own client (live.LookupUserAgent), which answers the
// thousands of suspect addresses of a mass failure at once.
func ScopeViolations(reqs []AuditRequest) []AuditRequest {
	var out []AuditRequest
	for _, r := range reqs {
		if r.APIGroup != "" || r.Subresource != "" || (r.Verb != "list" && r.Verb != "watch") {
			continue
		}
		switch r.Resource {
		case "pods":
			if !pins(r.FieldSelector, "spec.nodeName") && !(r.Verb == "list" && pins(r.FieldSelector, "status.podIP")) && !pagedLookup(r) {
				out = append(out, r)
			}
		case "nodes":
			if !pins(r.FieldSelector, "metadata.name") {
				out = append(out, r)
			}
		}
	}
	return out
}

// pins reports whether the field selector sel requires field to equal one
// value.
func pins(sel, field string) bool {
	s, err := fields.ParseSelector(sel)
	if err != nil {
		return false
	}
	v, ok := s.RequiresExactMatch(field)
	return ok && v != ""
}

// pagedLookup reports whether r is a page of the look-ups' list of every
// pod: a list with a limit, by their client.
func pagedLookup(r AuditRequest) bool {
	u, err := url.Parse(r.URI)
	return err == nil && r.Verb == "list" && r.FieldSelector == "" && r.UserAgent == live.LookupUserAgent && u.Query().Get("limit") != ""
}
