package gossip

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/skew"
)

// Declared is a gossip cluster the operator lets the controller read and
// act on, with the credential it is read with. Pods annotated as members
// of a cluster no declaration names are not asked anything: an
// annotation is a pod's claim, and a claim is not an identity.
type Declared struct {
	// System is consul, serf or memberlist.
	System string `json:"system"`
	// Namespace is the namespace of the cluster's pods: only pods there
	// speak for it.
	Namespace string `json:"namespace"`
	// Name is the cluster's name among the pods of the namespace, as
	// their ghostwatch.io/gossip-cluster annotation gives it; default the
	// system's name, as the annotation's.
	Name string `json:"name,omitempty"`
	// Scheme, when set, is the scheme every member is asked over (http
	// or https), whatever the pods' ghostwatch.io/gossip-scheme says.
	Scheme string `json:"scheme,omitempty"`
	// TokenFile is a file holding the credential (a mounted Secret's
	// key): Consul's ACL token, or Serf's RPC auth key. It is read again
	// at every read of the cluster, so that a rotated Secret is followed.
	TokenFile string `json:"tokenFile,omitempty"`
	// TokenSecret is a Secret of the cluster's namespace holding the
	// credential, read through the API server at every read of the
	// cluster (the controller needs get on that Secret, by name).
	TokenSecret *SecretKey `json:"tokenSecret,omitempty"`
	// CAFile is a PEM file of the certificate authorities the agents'
	// HTTPS certificates are checked against; default the system's.
	CAFile string `json:"caFile,omitempty"`
	// TLSServerName is the name the agents' certificates must carry;
	// default the address asked (a pod's IP, which agents' certificates
	// rarely name: Consul's carry server.<datacenter>.<domain>).
	TLSServerName string `json:"tlsServerName,omitempty"`
	// AllowPlaintextCredentials lets the credential travel unencrypted:
	// over http for Consul, and always for Serf, whose RPC has no TLS.
	AllowPlaintextCredentials bool `json:"allowPlaintextCredentials,omitempty"`
}

// SecretKey names a key of a Secret in the cluster's namespace.
type SecretKey struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

// Declarations are the gossip clusters the operator declared, as the
// controller's --gossip-clusters file holds them.
type Declarations struct {
	Clusters []Declared `json:"clusters"`
}

// Key returns the cluster d declares, as the pods' annotations name it.
func (d *Declared) Key() snapshot.GossipCluster {
	return snapshot.GossipCluster{System: d.System, Cluster: d.Namespace + "/" + cmp.Or(d.Name, d.System)}
}

// ReadDeclarations reads a --gossip-clusters file (YAML or JSON), and
// checks it: every field known, every cluster declared once, no
// credential that would travel in clear text unless allowed.
func ReadDeclarations(path string) (*Declarations, error) {
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return nil, fmt.Errorf("gossip clusters: %w", err)
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("gossip clusters %s: not a regular file (%s)", path, fi.Mode().Type())
	case fi.Size() > maxFile:
		return nil, fmt.Errorf("gossip clusters %s: more than %d MiB", path, maxFile>>20)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("gossip clusters: %w", err)
	}
	d, err := ParseDeclarations(b)
	if err != nil {
		return nil, fmt.Errorf("gossip clusters %s: %w", path, err)
	}
	return d, nil
}

// ParseDeclarations parses and checks declarations (ReadDeclarations).
func ParseDeclarations(b []byte) (*Declarations, error) {
	var d Declarations
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, errors.New("empty: want a list of clusters (clusters: [{system: consul, namespace: ..., tokenSecret: {name: ..., key: ...}}])")
	}
	if err := yaml.UnmarshalStrict(b, &d); err != nil {
		return nil, err
	}
	if len(d.Clusters) == 0 {
		return nil, errors.New("no cluster declared under clusters:")
	}
	seen := map[snapshot.GossipCluster]bool{}
	for i := range d.Clusters {
		c := &d.Clusters[i]
		if err := c.check(); err != nil {
			return nil, fmt.Errorf("clusters[%d]: %w", i, err)
		}
		if k := c.Key(); seen[k] {
			return nil, fmt.Errorf("clusters[%d]: %s is declared twice", i, clusterName(k))
		} else {
			seen[k] = true
		}
	}
	return &d, nil
}

func (d *Declared) check() error {
	if _, ok := defaultPort[d.System]; !ok && d.System != "memberlist" {
		return fmt.Errorf("system %q: want consul, serf or memberlist", d.System)
	}
	if errs := validation.IsDNS1123Label(d.Namespace); len(errs) > 0 {
		return fmt.Errorf("namespace %q: %s", d.Namespace, strings.Join(errs, "; "))
	}
	if d.Name != "" {
		if errs := validation.IsDNS1123Label(d.Name); len(errs) > 0 {
			return fmt.Errorf("name %q: %s", d.Name, strings.Join(errs, "; "))
		}
	}
	switch d.Scheme {
	case "", "http", "https":
	default:
		return fmt.Errorf("scheme %q: want http or https", d.Scheme)
	}
	if d.System == "serf" && (d.Scheme != "" || d.CAFile != "" || d.TLSServerName != "") {
		return errors.New("serf's RPC has no TLS: scheme, caFile and tlsServerName do not apply")
	}
	hasToken := d.TokenFile != "" || d.TokenSecret != nil
	switch {
	case d.TokenFile != "" && d.TokenSecret != nil:
		return errors.New("tokenFile and tokenSecret both given: give one")
	case d.TokenSecret != nil && (d.TokenSecret.Name == "" || d.TokenSecret.Key == ""):
		return errors.New("tokenSecret: give its name and key")
	case hasToken && d.System == "memberlist":
		return errors.New("memberlist's member list takes no credential: leave tokenFile and tokenSecret out")
	case hasToken && d.System == "serf" && !d.AllowPlaintextCredentials:
		return errors.New("serf's RPC has no TLS, and its auth key would travel in clear text to every pod asked: set allowPlaintextCredentials: true to send it anyway")
	case hasToken && d.System == "consul" && d.Scheme == "http" && !d.AllowPlaintextCredentials:
		return errors.New("scheme http: the ACL token would travel in clear text: use https, or set allowPlaintextCredentials: true")
	}
	if d.CAFile != "" {
		if _, err := d.caPool(); err != nil {
			return err
		}
	}
	return nil
}

func (d *Declared) caPool() (*x509.CertPool, error) {
	pem, err := os.ReadFile(d.CAFile)
	if err != nil {
		return nil, fmt.Errorf("caFile: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("caFile %s: no PEM certificate in it", d.CAFile)
	}
	return pool, nil
}

// covers reports whether p is a pod of a declared cluster, or one whose
// annotations cannot be used in a namespace a cluster is declared in:
// that is said, though nothing is asked of it.
func (ds *Declarations) covers(p annotated) bool {
	if ds.Find(p.key) != nil {
		return true
	}
	return p.err != "" && slices.ContainsFunc(ds.list(), func(d Declared) bool { return d.Namespace == p.namespace })
}

// list returns the declared clusters; none for nil.
func (ds *Declarations) list() []Declared {
	if ds == nil {
		return nil
	}
	return ds.Clusters
}

// Find returns the declaration of cluster k, or nil.
func (ds *Declarations) Find(k snapshot.GossipCluster) *Declared {
	if ds == nil {
		return nil
	}
	i := slices.IndexFunc(ds.Clusters, func(d Declared) bool { return d.Key() == k })
	if i < 0 {
		return nil
	}
	return &ds.Clusters[i]
}

// credential returns the cluster's credential as declared, read now: ""
// when none is declared.
func (d *Declared) credential(ctx context.Context, secrets corev1client.SecretsGetter) (string, error) {
	switch {
	case d.TokenFile != "":
		fi, err := os.Stat(d.TokenFile)
		if err != nil {
			return "", fmt.Errorf("tokenFile: %w", err)
		}
		if !fi.Mode().IsRegular() {
			return "", fmt.Errorf("tokenFile %s: not a regular file (%s)", d.TokenFile, fi.Mode().Type())
		}
		b, err := os.ReadFile(d.TokenFile)
		if err != nil {
			return "", fmt.Errorf("tokenFile: %w", err)
		}
		t := strings.TrimSpace(string(b))
		if t == "" {
			return "", fmt.Errorf("tokenFile %s: empty", d.TokenFile)
		}
		return t, nil
	case d.TokenSecret != nil:
		if secrets == nil {
			return "", errors.New("tokenSecret: no client to read Secrets with")
		}
		ref := d.Namespace + "/" + d.TokenSecret.Name
		s, err := secrets.Secrets(d.Namespace).Get(ctx, d.TokenSecret.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsForbidden(err):
			return "", fmt.Errorf("tokenSecret %s: %w (grant the controller get on this Secret by name: a Role in %s with resourceNames: [%s])", ref, err, d.Namespace, d.TokenSecret.Name)
		case err != nil:
			return "", fmt.Errorf("tokenSecret %s: %w", ref, err)
		}
		v, ok := s.Data[d.TokenSecret.Key]
		if !ok {
			return "", fmt.Errorf("tokenSecret %s: no key %q", ref, d.TokenSecret.Key)
		}
		t := strings.TrimSpace(string(v))
		if t == "" {
			return "", fmt.Errorf("tokenSecret %s: key %q is empty", ref, d.TokenSecret.Key)
		}
		return t, nil
	}
	return "", nil
}

// agent returns the API of member m of the declared cluster, with its
// credential: sent only to the member's own address, over TLS unless the
// declaration allows clear text, and never after a redirect.
func (d *Declared) agent(ctx context.Context, m Member, secrets corev1client.SecretsGetter) (Agent, error) {
	scheme := cmp.Or(d.Scheme, m.Scheme)
	token, err := d.credential(ctx, secrets)
	if err != nil {
		return nil, err
	}
	hostPort := m.Addr.String()
	switch d.System {
	case "consul":
		if token != "" && scheme != "https" && !d.AllowPlaintextCredentials {
			return nil, fmt.Errorf("the pod is asked over %s, and the ACL token would travel in clear text: declare scheme: https for cluster %s (or allowPlaintextCredentials: true)", scheme, clusterName(d.Key()))
		}
		c := &Consul{Addr: scheme + "://" + hostPort, Token: token, AllowPlaintext: d.AllowPlaintextCredentials}
		if scheme == "https" {
			client, err := d.httpsClient()
			if err != nil {
				return nil, err
			}
			c.Client = client
		}
		return c, nil
	case "serf":
		return &Serf{Addr: hostPort, AuthKey: token}, nil
	case "memberlist":
		client := &http.Client{Timeout: readTimeout}
		if scheme == "https" {
			if client, err = d.httpsClient(); err != nil {
				return nil, err
			}
		}
		// The member list's times (when a member went) are on the
		// agent's clock: measured from its answer, so that a proof that
		// compares them with the API server's allows for it.
		meter := &skew.Meter{Name: "pod " + m.Namespace + "/" + m.Name + "'s agent's"}
		client.Transport = meter.Wrap(cmp.Or[http.RoundTripper](client.Transport, http.DefaultTransport))
		return clocked{&Endpoint{URL: scheme + "://" + hostPort + MemberlistPath, Client: client}, meter}, nil
	}
	return nil, fmt.Errorf("no reader of %s", d.System)
}

// clocked is an agent whose views carry its clock, as meter measured it
// from its answers.
type clocked struct {
	Agent
	meter *skew.Meter
}

func (c clocked) Members(ctx context.Context) (*snapshot.GossipView, error) {
	v, err := c.Agent.Members(ctx)
	if v != nil {
		v.Clock = c.meter.Clock()
	}
	return v, err
}

// httpsClient is the client of the declared cluster's HTTPS agents.
func (d *Declared) httpsClient() (*http.Client, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: d.TLSServerName}
	if d.CAFile != "" {
		pool, err := d.caPool()
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}, nil
}
