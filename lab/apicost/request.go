package apicost

import (
	"net/http"
	"net/url"
	"strings"

	"k8s.io/apimachinery/pkg/fields"
)

// Request names an API request as the API server's authorizer and audit
// log name it: the verb, and the resource or, for a URL that names no
// resource (discovery, /version), the path.
type Request struct {
	// Verb is get, list, watch, create, update, patch, delete or
	// deletecollection for a resource; the HTTP method in lower case for a
	// path.
	Verb string
	// APIGroup is "" for the core group.
	APIGroup    string
	Resource    string
	Subresource string
	Namespace   string
	Name        string
	// Path is set instead of Resource for a URL that names no resource.
	Path string
	// FieldSelector and LabelSelector are the query's selectors, as sent.
	FieldSelector, LabelSelector string
}

// Key groups requests that cost the same: the verb, the resource (with its
// group and subresource) and the selectors, without namespace or name. A
// status.podIP term of a field selector is written status.podIP=<ip>, so
// that lists of pods by address are one key.
//
//	list pods fieldSelector=spec.nodeName=node-0
//	watch endpointslices.discovery.k8s.io labelSelector=kubernetes.io/service-name
//	get /api
func (r Request) Key() string {
	if r.Resource == "" {
		return r.Verb + " " + r.Path
	}
	var b strings.Builder
	b.WriteString(r.Verb + " " + r.Resource)
	if r.APIGroup != "" {
		b.WriteString("." + r.APIGroup)
	}
	if r.Subresource != "" {
		b.WriteString("/" + r.Subresource)
	}
	if r.FieldSelector != "" {
		b.WriteString(" fieldSelector=" + generalizeFields(r.FieldSelector))
	}
	if r.LabelSelector != "" {
		b.WriteString(" labelSelector=" + r.LabelSelector)
	}
	return b.String()
}

// generalizeFields writes the value of each status.podIP term as <ip>.
func generalizeFields(sel string) string {
	parsed, err := fields.ParseSelector(sel)
	if err != nil {
		return sel
	}
	var terms []string
	for _, req := range parsed.Requirements() {
		v := req.Value
		if req.Field == "status.podIP" {
			v = "<ip>"
		}
		terms = append(terms, req.Field+string(req.Operator)+v)
	}
	return strings.Join(terms, ",")
}

// namespaceSubresources are the subresources of a Namespace, which the API
// server does not read as a resource inside it.
var namespaceSubresources = map[string]bool{"status": true, "finalize": true}

// ParseRequest names the request for method on u, as the API server's
// request-info resolver does (k8s.io/apiserver's RequestInfoFactory).
func ParseRequest(method string, u *url.URL) Request {
	q := u.Query()
	r := Request{FieldSelector: q.Get("fieldSelector"), LabelSelector: q.Get("labelSelector")}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	var rest []string
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		rest = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		r.APIGroup, rest = parts[1], parts[3:]
	default:
		return Request{Verb: strings.ToLower(method), Path: u.Path}
	}
	switch method {
	case http.MethodPost:
		r.Verb = "create"
	case http.MethodGet, http.MethodHead:
		r.Verb = "get"
	case http.MethodPut:
		r.Verb = "update"
	case http.MethodPatch:
		r.Verb = "patch"
	case http.MethodDelete:
		r.Verb = "delete"
	default:
		return Request{Verb: strings.ToLower(method), Path: u.Path}
	}
	// The deprecated /watch/ prefix.
	if len(rest) > 0 && rest[0] == "watch" {
		r.Verb, rest = "watch", rest[1:]
	}
	if len(rest) > 1 && rest[0] == "namespaces" {
		r.Namespace = rest[1]
		if len(rest) > 2 && !namespaceSubresources[rest[2]] {
			rest = rest[2:]
		}
	}
	switch {
	case len(rest) >= 3:
		r.Subresource = rest[2]
		fallthrough
	case len(rest) == 2:
		r.Name = rest[1]
		fallthrough
	case len(rest) == 1:
		r.Resource = rest[0]
	}
	if r.Resource == "" {
		return Request{Verb: strings.ToLower(method), Path: u.Path}
	}
	if r.Resource == "namespaces" && r.Namespace != "" {
		// /api/v1/namespaces/x names the namespace x itself.
		r.Namespace = ""
	}
	if r.Name == "" && r.Verb == "get" {
		r.Verb = "list"
		if w := q.Get("watch"); w == "true" || w == "1" {
			r.Verb = "watch"
		}
	}
	if r.Name == "" && r.Verb == "delete" {
		r.Verb = "deletecollection"
	}
	return r
}
