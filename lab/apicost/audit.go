package apicost

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"time"
)

// AuditRequest is one request as the API server's audit log recorded it.
type AuditRequest struct {
	Request
	// ID is the audit ID: a watch appears twice in the log (when its
	// answer starts, and when it ends), counted once.
	ID        string
	User      string
	UserAgent string
	// URI is the request's URI, query included.
	URI string
	// Received is requestReceivedTimestamp.
	Received time.Time
	// Code is the response status code (0 when the log has none).
	Code int
}

// auditEvent is what ParseAudit reads of an audit.k8s.io/v1 Event.
type auditEvent struct {
	AuditID    string `json:"auditID"`
	Stage      string `json:"stage"`
	RequestURI string `json:"requestURI"`
	Verb       string `json:"verb"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	UserAgent string `json:"userAgent"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		APIGroup    string `json:"apiGroup"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
}

// ParseAudit reads an audit log of JSON lines (--audit-log-format=json)
// and returns the requests of the users named, each once, in the order of
// their first line. A line that is not an audit event is an error naming
// its number.
func ParseAudit(r io.Reader, users ...string) ([]AuditRequest, error) {
	want := map[string]bool{}
	for _, u := range users {
		want[u] = true
	}
	seen := map[string]bool{}
	var out []AuditRequest
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var ev auditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("audit log line %d: %w", line, err)
		}
		if ev.AuditID == "" || ev.Verb == "" {
			return nil, fmt.Errorf("audit log line %d: not an audit event (no auditID or verb)", line)
		}
		if !want[ev.User.Username] || seen[ev.AuditID] {
			continue
		}
		seen[ev.AuditID] = true
		out = append(out, ev.request())
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the audit log: %w", err)
	}
	return out, nil
}

func (ev *auditEvent) request() AuditRequest {
	ar := AuditRequest{ID: ev.AuditID, User: ev.User.Username, UserAgent: ev.UserAgent, URI: ev.RequestURI,
		Received: ev.RequestReceivedTimestamp, Request: Request{Verb: ev.Verb}}
	if ev.ResponseStatus != nil {
		ar.Code = ev.ResponseStatus.Code
	}
	u, err := url.ParseRequestURI(ev.RequestURI)
	if err != nil {
		u = &url.URL{Path: ev.RequestURI}
	}
	if ev.ObjectRef == nil || ev.ObjectRef.Resource == "" {
		ar.Path = u.Path
		return ar
	}
	q := u.Query()
	ar.APIGroup, ar.Resource, ar.Subresource = ev.ObjectRef.APIGroup, ev.ObjectRef.Resource, ev.ObjectRef.Subresource
	ar.Namespace, ar.Name = ev.ObjectRef.Namespace, ev.ObjectRef.Name
	ar.FieldSelector, ar.LabelSelector = q.Get("fieldSelector"), q.Get("labelSelector")
	return ar
}
