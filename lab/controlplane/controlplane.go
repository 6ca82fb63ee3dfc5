package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/ghostwatch/ghostwatch/internal/testenv"
)

// BinEnv names the directory holding the binaries; scripts/kube-binaries.sh
// prints it.
const BinEnv = "GHOSTWATCH_KUBE_BIN"

// Binaries are the control plane's executables.
var Binaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-proxy"}

// Script builds Binaries and prints the directory they are in.
const Script = "scripts/kube-binaries.sh"

// ErrNoBinaries is returned by FindBinaries when they are not built.
var ErrNoBinaries = errors.New("the Kubernetes binaries are not built: run " + Script + " and set " + BinEnv + " to the directory it prints")

// FindBinaries returns the directory named by $GHOSTWATCH_KUBE_BIN, or
// ErrNoBinaries when it is unset. A directory that lacks a binary is an
// error naming it.
func FindBinaries() (string, error) {
	return testenv.BinDir(BinEnv, Script, ErrNoBinaries, Binaries...)
}

// CheckBinaries returns an error naming the first of Binaries that dir
// lacks and the script that builds them; what names the directory in the
// message (the flag that gave it: "--bin /x").
func CheckBinaries(what, dir string) error {
	return testenv.HasExecutables(what, dir, Script, Binaries...)
}

// The identities the control plane knows, by bearer token. Each user's
// permissions come from RBAC: the bootstrap roles for the system users, the
// project's manifests for the agent.
const (
	UserAdmin     = "admin"             // group system:masters
	UserKubeProxy = "system:kube-proxy" // ClusterRole system:node-proxier
	UserKCM       = "kube-controller-manager"
	// UserAgent is the agent's ServiceAccount, as deploy/agent binds it.
	UserAgent = "system:serviceaccount:ghostwatch:ghostwatch-agent"
	// UserController is the controller's ServiceAccount, as
	// deploy/controller binds it.
	UserController = "system:serviceaccount:ghostwatch:ghostwatch-controller"
	// UserKubelet is the real nodes' kubelets (lab/realnode): every
	// node's, with the rights of an administrator, as no Node authorizer
	// runs here.
	UserKubelet = "kubelet"
)

// Options configure Start.
type Options struct {
	// Bin is the directory of the binaries (FindBinaries).
	Bin string
	// Dir holds data, certificates and logs; a temporary directory when
	// empty, removed by Stop.
	Dir string
	// ServiceCIDR is --service-cluster-ip-range (default 10.96.0.0/16).
	ServiceCIDR string
	// MaxEndpointsPerSlice is the EndpointSlice controller's
	// --max-endpoints-per-slice (default 100, as Kubernetes ships): a small
	// value spreads a Service over several slices, and a rolling update
	// then moves endpoints between them.
	MaxEndpointsPerSlice int
	// AuditLog turns the API server's audit log on: every request, at
	// level Metadata (who, verb, resource, URI with its selectors, when
	// received, status code; no bodies), as JSON lines in AuditLog(),
	// never rotated while the control plane runs. It costs the API server
	// a write per request; off by default.
	AuditLog bool
	// Workloads runs what real nodes' workloads need beside the
	// EndpointSlice controller: kube-scheduler; the Deployment, ReplicaSet,
	// DaemonSet, garbage-collector, namespace, ServiceAccount and
	// kube-root-ca.crt publisher controllers; and the ServiceAccount
	// admission plugin, so that pods mount their ServiceAccount's token as
	// on a cluster. Off by default: a pod created in a namespace whose
	// default ServiceAccount does not exist yet is then refused, and the
	// stand-in kubelet's tests need none of it.
	Workloads bool
}

// workloadControllers are the controller manager's controllers under
// Options.Workloads.
var workloadControllers = []string{"endpointslice-controller", "serviceaccount-controller",
	"root-ca-certificate-publisher-controller", "deployment-controller", "replicaset-controller",
	"daemonset-controller", "garbage-collector-controller", "namespace-controller",
	// It lifts the not-ready taint a Node is created with once its
	// kubelet reports it Ready, as on a cluster.
	"node-lifecycle-controller"}

// auditPolicy records every request at level Metadata, once it has been
// answered (or, for a watch, once the answer started).
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
`

// auditLogMaxSizeMB is --audit-log-maxsize: the API server rotates its
// audit log at 100 MB when the flag is 0, so it is set far above what a
// test or a benchmark writes.
const auditLogMaxSizeMB = 100 * 1024

// ControlPlane is etcd, kube-apiserver and kube-controller-manager on
// 127.0.0.1.
type ControlPlane struct {
	// Server is the API server's URL.
	Server string
	// Port is its port on 127.0.0.1 (the same in every node namespace,
	// through the node's forwarder).
	Port int
	// ServiceCIDR is the range ClusterIPs are allocated from.
	ServiceCIDR netip.Prefix
	// Dir holds everything the control plane wrote.
	Dir    string
	tmp    bool
	bin    string
	pki    *pki
	tokens map[string]string
	procs  []*process
	audit  string
	// api is the API server last started and apiArgs its flags, for
	// StartAPIServer; apiStarts counts its starts, for its logs' names.
	api       *process
	apiArgs   []string
	apiStarts int
	// Admin is a client with every permission.
	Admin kubernetes.Interface
	// workloads is Options.Workloads.
	workloads bool
}

// InClusterAddr is where pods reach the API server under
// Options.Workloads: its advertised address, the kubernetes Service's
// endpoint, which every node serves on its loopback through its forwarder
// (198.18.0.0/15 is the range set aside for benchmarks and labs, RFC 2544).
var InClusterAddr = netip.MustParseAddr("198.18.0.1")

// advertise is the API server's --advertise-address.
func (cp *ControlPlane) advertise() netip.Addr {
	if cp.workloads {
		return InClusterAddr
	}
	return netip.MustParseAddr("127.0.0.1")
}

// Start runs etcd, the API server and the controller manager, and returns
// when the API server is ready. On error everything started is stopped.
func Start(ctx context.Context, o Options) (cp *ControlPlane, err error) {
	if o.ServiceCIDR == "" {
		o.ServiceCIDR = "10.96.0.0/16"
	}
	if o.MaxEndpointsPerSlice <= 0 {
		o.MaxEndpointsPerSlice = 100
	}
	if o.Workloads {
		if err := testenv.HasExecutables("the Kubernetes binaries' directory", o.Bin, Script, "kube-scheduler"); err != nil {
			return nil, err
		}
	}
	cp = &ControlPlane{Dir: o.Dir, bin: o.Bin, tokens: map[string]string{}}
	if cp.ServiceCIDR, err = netip.ParsePrefix(o.ServiceCIDR); err != nil {
		return nil, fmt.Errorf("service CIDR: %w", err)
	}
	if cp.Dir == "" {
		if cp.Dir, err = os.MkdirTemp("", "ghostwatch-cp-"); err != nil {
			return nil, err
		}
		cp.tmp = true
	}
	defer func() {
		if err != nil {
			cp.Stop()
		}
	}()
	var sans []netip.Addr
	if o.Workloads {
		// Pods reach the API server at the kubernetes Service's ClusterIP
		// (the range's first), translated to InClusterAddr.
		sans = []netip.Addr{cp.ServiceCIDR.Masked().Addr().Next(), InClusterAddr}
		cp.workloads = true
	}
	if cp.pki, err = newPKI(cp.Dir, sans...); err != nil {
		return nil, err
	}
	var tokenFile strings.Builder
	for i, u := range []struct{ name, groups string }{
		{UserAdmin, "system:masters"},
		{UserKubeProxy, ""},
		{UserKCM, "system:masters"},
		{UserAgent, "system:serviceaccounts,system:serviceaccounts:ghostwatch"},
		{UserController, "system:serviceaccounts,system:serviceaccounts:ghostwatch"},
		{UserKubelet, "system:masters"},
	} {
		t := newToken()
		cp.tokens[u.name] = t
		fmt.Fprintf(&tokenFile, "%s,%s,uid-%d,%q\n", t, u.name, i, u.groups)
	}
	tokens := filepath.Join(cp.Dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(tokenFile.String()), 0o600); err != nil {
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	etcdURL, peerURL := "http://127.0.0.1:"+strconv.Itoa(ports[0]), "http://127.0.0.1:"+strconv.Itoa(ports[1])
	cp.Port = ports[2]
	cp.Server = "https://127.0.0.1:" + strconv.Itoa(cp.Port)

	etcd, err := cp.start("etcd", filepath.Join(o.Bin, "etcd"),
		"--name=default", "--data-dir="+filepath.Join(cp.Dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL, "--unsafe-no-fsync", "--log-level=warn")
	if err != nil {
		return nil, err
	}
	plain := &http.Client{Timeout: 2 * time.Second}
	if err := etcd.waitFor(ctx, time.Minute, "healthy", func(ctx context.Context) error {
		return get(ctx, plain, etcdURL+"/health", "", etcdHealthy)
	}); err != nil {
		return nil, err
	}

	apiArgs := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=" + cp.advertise().String(), "--secure-port=" + strconv.Itoa(cp.Port),
		"--tls-cert-file=" + cp.pki.certFile, "--tls-private-key-file=" + cp.pki.keyFile,
		// A kubelet API the tests serve (ServeKubeletAPI) holds a
		// certificate of this CA.
		"--kubelet-certificate-authority=" + cp.pki.caFile,
		"--token-auth-file=" + tokens, "--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + cp.pki.saPubFile, "--service-account-signing-key-file=" + cp.pki.saKeyFile,
		"--service-cluster-ip-range=" + o.ServiceCIDR,
		"--enable-priority-and-fairness=false",
		"--allow-privileged=true",
	}
	if !o.Workloads {
		// Pods are created without waiting for a default ServiceAccount:
		// no controller makes one, and the stand-in's pods need none.
		apiArgs = append(apiArgs, "--disable-admission-plugins=ServiceAccount")
	}
	if o.AuditLog {
		policy := filepath.Join(cp.Dir, "audit-policy.yaml")
		if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
			return nil, err
		}
		cp.audit = filepath.Join(cp.Dir, "audit.log")
		apiArgs = append(apiArgs, "--audit-policy-file="+policy, "--audit-log-path="+cp.audit,
			"--audit-log-format=json", "--audit-log-mode=blocking",
			"--audit-log-maxsize="+strconv.Itoa(auditLogMaxSizeMB), "--audit-log-maxbackup=0", "--audit-log-maxage=0")
	}
	cp.apiArgs = apiArgs
	if err := cp.startAPIServer(ctx, "kube-apiserver"); err != nil {
		return nil, err
	}
	if cp.Admin, err = kubernetes.NewForConfig(cp.Config(UserAdmin)); err != nil {
		return nil, err
	}

	kcmConfig, err := cp.WriteKubeconfig(UserKCM)
	if err != nil {
		return nil, err
	}
	controllers := []string{"endpointslice-controller"}
	if o.Workloads {
		controllers = workloadControllers
	}
	kcm, err := cp.start("kube-controller-manager", filepath.Join(o.Bin, "kube-controller-manager"),
		"--kubeconfig="+kcmConfig, "--controllers="+strings.Join(controllers, ","),
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0",
		"--concurrent-service-endpoint-syncs=5", "--max-endpoints-per-slice="+strconv.Itoa(o.MaxEndpointsPerSlice),
		"--root-ca-file="+cp.pki.caFile, "--v=2")
	if err != nil {
		return nil, err
	}
	if o.Workloads {
		if _, err := cp.start("kube-scheduler", filepath.Join(o.Bin, "kube-scheduler"),
			"--kubeconfig="+kcmConfig, "--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0", "--v=2"); err != nil {
			return nil, err
		}
	}
	// The controller manager gives up and exits when the API server is
	// not healthy within its first seconds: a test that stops or pauses
	// the API server at once would race it. It is running once its
	// EndpointSlice controller has synced its caches; it has no health
	// port here, so its log says when.
	if err := kcm.waitFor(ctx, 2*time.Minute, "its EndpointSlice controller synced", func(context.Context) error {
		return logHas(kcm.log, endpointSliceSynced)
	}); err != nil {
		return nil, err
	}
	return cp, nil
}

// endpointSliceSynced is the controller manager's log line once its
// EndpointSlice controller has synced its caches (`"Caches are synced"
// controller="endpoint_slice"`, or `Caches are synced for endpoint_slice`
// in releases that logged it unstructured).
func endpointSliceSynced(line string) bool {
	return strings.Contains(line, "Caches are synced") && strings.Contains(line, "endpoint_slice")
}

// logHas is nil once a line of the log at path satisfies match.
func logHas(path string, match func(string) bool) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for line := range strings.Lines(string(b)) {
		if match(line) {
			return nil
		}
	}
	return errNotReady
}

// startAPIServer starts kube-apiserver with cp.apiArgs, its log named
// name, and waits until it is ready.
func (cp *ControlPlane) startAPIServer(ctx context.Context, name string) error {
	api, err := cp.start(name, filepath.Join(cp.bin, "kube-apiserver"), cp.apiArgs...)
	if err != nil {
		return err
	}
	cp.api = api
	secure := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: cp.CertPool()}}}
	return api.waitFor(ctx, 2*time.Minute, "ready", func(ctx context.Context) error {
		return get(ctx, secure, cp.Server+"/readyz", cp.tokens[UserAdmin], nil)
	})
}

func (cp *ControlPlane) start(name, bin string, args ...string) (*process, error) {
	p, err := startProcess(cp.Dir, name, nil, append([]string{bin}, args...)...)
	if err != nil {
		return nil, err
	}
	cp.procs = append(cp.procs, p)
	return p, nil
}

// Config is a client configuration for user.
func (cp *ControlPlane) Config(user string) *rest.Config {
	return &rest.Config{
		Host:            cp.Server,
		BearerToken:     cp.tokens[user],
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.pki.caPEM},
		QPS:             100, Burst: 200,
	}
}

// WriteKubeconfig writes a kubeconfig for user under Dir and returns its
// path. It works in the host and in every node namespace alike: both reach
// the API server at 127.0.0.1.
func (cp *ControlPlane) WriteKubeconfig(user string) (string, error) {
	return cp.writeKubeconfig(user, cp.Server, strings.NewReplacer(":", "-").Replace(user)+".kubeconfig")
}

// WriteKubeconfigFor writes a kubeconfig for user that reaches the API
// server at server instead, such as a forwarder in a node namespace that
// presents ServingCertificate, and returns its path (under Dir, named by
// the user and server's port).
func (cp *ControlPlane) WriteKubeconfigFor(user, server string) (string, error) {
	u, err := url.Parse(server)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("server %q: want a URL such as https://127.0.0.1:6443", server)
	}
	name := strings.NewReplacer(":", "-").Replace(user) + "@" + strings.NewReplacer(":", "-", "[", "", "]", "").Replace(u.Host) + ".kubeconfig"
	return cp.writeKubeconfig(user, server, name)
}

func (cp *ControlPlane) writeKubeconfig(user, server, name string) (string, error) {
	if _, ok := cp.tokens[user]; !ok {
		return "", fmt.Errorf("no such user %q", user)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: cp.pki.caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: cp.tokens[user]}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: user}
	cfg.CurrentContext = "test"
	path := filepath.Join(cp.Dir, name)
	return path, clientcmd.WriteToFile(*cfg, path)
}

// ServingCertificate is the API server's own certificate and key (for
// 127.0.0.1, signed by the control plane's CA): a forwarder in a node that
// terminates TLS, to see what the API server answers, presents it, so that
// clients trust it as they trust the API server and the handshake is the
// same size.
func (cp *ControlPlane) ServingCertificate() (tls.Certificate, error) {
	return tls.LoadX509KeyPair(cp.pki.certFile, cp.pki.keyFile)
}

// CertPool holds the control plane's CA, which signed the API server's
// certificate.
func (cp *ControlPlane) CertPool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cp.pki.caPEM)
	return pool
}

// AuditLog is the path of the API server's audit log (Options.AuditLog), or
// "" when it is off.
func (cp *ControlPlane) AuditLog() string { return cp.audit }

// Logs are the paths of the control-plane processes' logs.
func (cp *ControlPlane) Logs() []string {
	var out []string
	for _, p := range cp.procs {
		out = append(out, p.log)
	}
	return out
}

// Check reports a control-plane process that has exited.
func (cp *ControlPlane) Check() error {
	for _, p := range cp.procs {
		if p.retired {
			continue
		}
		if done, err := p.exited(); done {
			return fmt.Errorf("%s exited (%v); its log (%s) ends:\n%s", p.name, err, p.log, p.tail())
		}
	}
	return nil
}

// Stop stops every process, the last started first, and removes Dir when
// Start made it.
func (cp *ControlPlane) Stop() {
	for i := len(cp.procs) - 1; i >= 0; i-- {
		cp.procs[i].stop(10 * time.Second)
	}
	cp.procs = nil
	if cp.tmp {
		os.RemoveAll(cp.Dir)
	}
}

// get is nil when url answers 200 and check, when set, accepts the body.
func get(ctx context.Context, c *http.Client, url, token string, check func([]byte) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: %s: %s", errNotReady, resp.Status, strings.TrimSpace(string(b)))
	}
	if check != nil {
		return check(b)
	}
	return nil
}
