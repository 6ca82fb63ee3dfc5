package kube

import (
	"errors"
	"fmt"
	"net/url"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/ghostwatch/ghostwatch/internal/redact"
)

// The resources ghostwatch lists and watches, as the API server's errors
// and RBAC rules name them. The packages that read them (source/kube/live,
// source/kube/fresh) name them by these, and say which they need.
const (
	ResourcePods           = "pods"
	ResourceServices       = "services"
	ResourceEndpointSlices = "endpointslices"
	ResourceNodes          = "nodes"
	ResourceServiceCIDRs   = "servicecidrs"
	ResourceIPAddresses    = "ipaddresses"
)

// rbacName is how a ClusterRole names each resource.
var rbacName = map[string]string{
	ResourcePods:           "pods",
	ResourceServices:       "services",
	ResourceEndpointSlices: "endpointslices (API group discovery.k8s.io)",
	ResourceNodes:          "nodes",
	ResourceServiceCIDRs:   "servicecidrs (API group networking.k8s.io)",
	ResourceIPAddresses:    "ipaddresses (API group networking.k8s.io)",
}

// DescribeError says what a list or watch error of resource (one of the
// Resource names) means: for a refusal, the permission missing; for an
// unserved resource, that it is not served; for a failure to reach the
// server, what failed without the request's URL, which the caller names.
// With resource "", an API error is rendered as its message and code.
func DescribeError(err error, resource string) string {
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		s := st.Status()
		switch {
		case resource == "":
		case s.Code == 401:
			return "Unauthorized (401): the API server rejected the credentials; the token or client certificate is missing, invalid or expired"
		case s.Code == 403:
			return fmt.Sprintf("%s (403 Forbidden): missing permission to list and watch %s in all namespaces (a ClusterRole rule with verbs list, watch)",
				s.Message, rbacName[resource])
		case s.Code == 404:
			return fmt.Sprintf("the API server does not serve %s (404 Not Found)", rbacName[resource])
		}
		if s.Message != "" {
			return fmt.Sprintf("%s (%d %s)", s.Message, s.Code, s.Reason)
		}
		return fmt.Sprintf("%d %s", s.Code, s.Reason)
	}
	return transportError(err)
}

// transportError strips the request from an error of the HTTP client:
// what failed is more useful than the URL, which the caller names. Any
// URL left in it loses its user information.
func transportError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return redact.Text(ue.Err.Error())
	}
	return redact.Text(err.Error())
}
