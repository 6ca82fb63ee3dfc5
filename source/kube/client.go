package kube

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"reflect"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ghostwatch/ghostwatch/internal/redact"
)

// ClientFromFlags builds a client as kubectl would from the same flags
// (--kubeconfig, --context, --server, --token, ...; $KUBECONFIG and
// ~/.kube/config; in a pod, its service account), and returns it with the
// URL of the server it talks to.
//
// Where kubectl would fall back to http://localhost:8080 because nothing
// is configured, it fails instead and says so.
func ClientFromFlags(f *genericclioptions.ConfigFlags) (kubernetes.Interface, string, error) {
	cfg, err := ConfigFromFlags(f)
	if err != nil {
		return nil, "", err
	}
	return ClientForConfig(cfg)
}

// ConfigFromFlags is the REST config ClientFromFlags builds its client
// from, for a command that needs it too (a port-forward, a dynamic
// client): the kubeconfig read once, and checked as ClientFromFlags checks
// it.
func ConfigFromFlags(f *genericclioptions.ConfigFlags) (*rest.Config, error) {
	if unconfigured(f) {
		return nil, errNoConfig
	}
	cfg, err := f.ToRESTConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, errNoConfig
		}
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return cfg, nil
}

var errNoConfig = errors.New("no Kubernetes configuration: no kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config) and not running in a pod; " +
	"pass --kubeconfig or --server, or read saved objects with --kube-objects")

// unconfigured reports whether no kubeconfig names a cluster, no --server
// is given, and this is not a pod: kubectl's defaults would then point at
// http://localhost:8080, which is never the cluster meant.
func unconfigured(f *genericclioptions.ConfigFlags) bool {
	if f.APIServer != nil && *f.APIServer != "" {
		return false
	}
	if os.Getenv("KUBERNETES_SERVICE_HOST") != "" || os.Getenv("KUBERNETES_MASTER") != "" {
		return false
	}
	raw, err := f.ToRawKubeConfigLoader().RawConfig()
	return err == nil && len(raw.Clusters) == 0
}

// ClientForConfig builds a client from a REST config, asking for protobuf
// (JSON still accepted), and returns it with the server's URL, its user
// information redacted (a kubeconfig's server may carry a password).
func ClientForConfig(cfg *rest.Config) (kubernetes.Interface, string, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.UserAgent == "" {
		cfg.UserAgent = "ghostwatch"
	}
	if cfg.ContentType == "" {
		cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
		cfg.ContentType = "application/vnd.kubernetes.protobuf"
	}
	server := redact.Addr(cfg.Host)
	if u, _, err := rest.DefaultServerUrlFor(cfg); err == nil {
		server = strings.TrimSuffix(redact.URL(u), "/")
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, "", redact.Error(fmt.Errorf("API server %s: %w", server, err), cfg.Host)
	}
	return client, server, nil
}

// ServerURL returns the URL client talks to, its user information
// redacted, or "" when it has none (a fake client).
func ServerURL(client kubernetes.Interface) string {
	if isNil(client) {
		return ""
	}
	rc := client.Discovery().RESTClient()
	if isNil(rc) {
		return ""
	}
	u := rc.Get().URL()
	u.RawQuery = ""
	u.Path = strings.TrimSuffix(u.Path, "/")
	return redact.URL(u)
}

// Probe asks the server for its version, which every client may read: it
// tells an unreachable or misconfigured server from missing permissions
// (DescribeProbe says which).
func Probe(ctx context.Context, client kubernetes.Interface) error {
	rc := client.Discovery().RESTClient()
	if isNil(rc) {
		// A fake client: nothing to reach.
		_, err := client.Discovery().ServerVersion()
		return err
	}
	return rc.Get().AbsPath("/version").Do(ctx).Error()
}

// DescribeProbe says why Probe failed, as the rest of a sentence that
// starts with the server's name (ServerURL); timeout is how long the probe
// was allowed.
func DescribeProbe(err error, timeout time.Duration) string {
	var (
		unknownCA   x509.UnknownAuthorityError
		hostErr     x509.HostnameError
		invalidCert x509.CertificateInvalidError
		verifyErr   *tls.CertificateVerificationError
		recordErr   tls.RecordHeaderError
		netErr      net.Error
	)
	switch {
	case apierrors.IsUnauthorized(err):
		return "rejected the credentials: Unauthorized (401); the token or client certificate in the kubeconfig is missing, invalid or expired"
	case apierrors.IsForbidden(err):
		return "refused to show its version: " + DescribeError(err, "") + " (check the kubeconfig user)"
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("did not answer within %s", timeout)
	case errors.Is(err, context.Canceled):
		return "was not reached: " + redact.Text(err.Error())
	case errors.As(err, &unknownCA), errors.As(err, &hostErr), errors.As(err, &invalidCert), errors.As(err, &verifyErr):
		return "failed TLS verification: " + transportError(err) + " (check the kubeconfig's certificate-authority and server name)"
	case errors.As(err, &recordErr), strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return "does not speak TLS: " + transportError(err) + " (is the URL's scheme right?)"
	case errors.As(err, &netErr) && netErr.Timeout():
		return fmt.Sprintf("did not answer within %s: %s", timeout, transportError(err))
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		return "answered with an error: " + DescribeError(err, "")
	}
	return "is not reachable: " + transportError(err)
}

// isNil reports whether v is nil, or a nil pointer in an interface.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}
