package agent

import "k8s.io/client-go/rest"

func restConfigFor(server string) *rest.Config {
	return &rest.Config{Host: server, BearerToken: "x", TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
}
