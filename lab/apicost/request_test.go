package apicost

import (
	"net/http"
	"net/url"
	"testing"
)

func TestParseRequest(t *testing.T) {
	for _, tc := range []struct {
		method, uri string
		want        Request
		key         string
	}{
		{"GET", "/api/v1/pods?limit=500&resourceVersion=0", Request{Verb: "list", Resource: "pods"}, "list pods"},
		{"GET", "/api/v1/pods?allowWatchBookmarks=true&fieldSelector=spec.nodeName%3Dnode-0&watch=true",
			Request{Verb: "watch", Resource: "pods", FieldSelector: "spec.nodeName=node-0"}, "watch pods fieldSelector=spec.nodeName=node-0"},
		{"GET", "/api/v1/pods?fieldSelector=status.podIP%3D10.244.0.7", Request{Verb: "list", Resource: "pods", FieldSelector: "status.podIP=10.244.0.7"},
			"list pods fieldSelector=status.podIP=<ip>"},
		{"GET", "/api/v1/nodes?fieldSelector=metadata.name%3Dnode-0&watch=1", Request{Verb: "watch", Resource: "nodes", FieldSelector: "metadata.name=node-0"},
			"watch nodes fieldSelector=metadata.name=node-0"},
		{"GET", "/apis/discovery.k8s.io/v1/endpointslices?labelSelector=%21service.kubernetes.io%2Fheadless%2C%21service.kubernetes.io%2Fservice-proxy-name",
			Request{Verb: "list", APIGroup: "discovery.k8s.io", Resource: "endpointslices", LabelSelector: "!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name"},
			"list endpointslices.discovery.k8s.io labelSelector=!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name"},
		{"GET", "/api/v1/namespaces/apps-0/pods/web-1", Request{Verb: "get", Resource: "pods", Namespace: "apps-0", Name: "web-1"}, "get pods"},
		{"PUT", "/api/v1/namespaces/apps-0/pods/web-1/status", Request{Verb: "update", Resource: "pods", Subresource: "status", Namespace: "apps-0", Name: "web-1"}, "update pods/status"},
		{"POST", "/apis/events.k8s.io/v1/namespaces/default/events", Request{Verb: "create", APIGroup: "events.k8s.io", Resource: "events", Namespace: "default"}, "create events.events.k8s.io"},
		{"PATCH", "/api/v1/namespaces/default/events/x.1", Request{Verb: "patch", Resource: "events", Namespace: "default", Name: "x.1"}, "patch events"},
		{"DELETE", "/api/v1/namespaces/apps-0/pods", Request{Verb: "deletecollection", Resource: "pods", Namespace: "apps-0"}, "deletecollection pods"},
		{"GET", "/api/v1/namespaces/apps-0", Request{Verb: "get", Resource: "namespaces", Name: "apps-0"}, "get namespaces"},
		{"PUT", "/api/v1/namespaces/apps-0/finalize", Request{Verb: "update", Resource: "namespaces", Subresource: "finalize", Name: "apps-0"}, "update namespaces/finalize"},
		{"GET", "/api/v1/watch/pods", Request{Verb: "watch", Resource: "pods"}, "watch pods"},
		{"GET", "/api", Request{Verb: "get", Path: "/api"}, "get /api"},
		{"GET", "/apis/networking.k8s.io/v1", Request{Verb: "get", Path: "/apis/networking.k8s.io/v1"}, "get /apis/networking.k8s.io/v1"},
		{"GET", "/version", Request{Verb: "get", Path: "/version"}, "get /version"},
	} {
		u, err := url.ParseRequestURI(tc.uri)
		if err != nil {
			t.Fatal(err)
		}
		got := ParseRequest(tc.method, u)
		if got != tc.want {
			t.Errorf("%s %s = %+v, want %+v", tc.method, tc.uri, got, tc.want)
		}
		if k := got.Key(); k != tc.key {
			t.Errorf("%s %s: key %q, want %q", tc.method, tc.uri, k, tc.key)
		}
	}
	if got := ParseRequest(http.MethodOptions, &url.URL{Path: "/api/v1/pods"}); got.Verb != "options" || got.Path != "/api/v1/pods" {
		t.Errorf("OPTIONS: %+v, want the path", got)
	}
}
