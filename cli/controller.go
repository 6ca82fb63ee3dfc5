package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/ghostwatch/ghostwatch/controller"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/source/kube"
)

type controllerOptions struct {
	kubeFlags      *genericclioptions.ConfigFlags
	identity       string
	leaseNamespace string
	leaseName      string
	listen         string
	logFormat      string
	logLevel       string
}

func newControllerCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &controllerOptions{kubeFlags: genericclioptions.NewConfigFlags(true)}
	o.kubeFlags.Namespace = nil
	rules := controller.Rules(rule.InScope(rule.All(rule.Config{}), rule.ScopeCluster))
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Watch the whole cluster (one leader of a Deployment) and report its ghosts continuously",
		Long: `controller is ghostwatch's cluster-wide watcher, run as a Deployment
(deploy/controller). Its replicas elect a leader on a Lease; the leader watches
every Pod and runs the cluster rules after each burst of changes:

` + ruleList(rules) + `
Findings are exported as metrics (:9809/metrics), logged, and reported as a
Warning Event on every object they concern when they first appear. The node
agents never watch every Pod for these rules: the controller is the one
watcher. It is read-only: it writes its Lease and Events, nothing else.

A replica that loses the Lease while leading exits with status 2, so that its
restart campaigns afresh. /readyz is ready on a standby replica, and on the
leader once it has listed every Pod.`,
		Example: `  # in the cluster: kubectl apply -k deploy/controller
  ghostwatch controller --kubeconfig ~/.kube/config --lease-namespace default --log-format text`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context(), streams, rules) },
	}
	f := cmd.Flags()
	o.kubeFlags.AddFlags(f)
	f.StringVar(&o.identity, "identity", "", "this replica's name in the Lease (default $POD_NAME, else the hostname)")
	f.StringVar(&o.leaseNamespace, "lease-namespace", "", "the namespace of the Lease the replicas elect a leader on (default $POD_NAMESPACE, else ghostwatch)")
	f.StringVar(&o.leaseName, "lease-name", "ghostwatch-controller", "the Lease's name")
	f.StringVar(&o.listen, "listen", ":9809", "address serving /metrics, /healthz and /readyz (empty: none)")
	f.StringVar(&o.logFormat, "log-format", "json", "log format: json or text")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return cmd
}

func (o *controllerOptions) run(ctx context.Context, streams genericiooptions.IOStreams, rules []rule.Rule) error {
	log, err := newLogger(streams.ErrOut, o.logFormat, o.logLevel)
	if err != nil {
		return withCode(ExitError, err)
	}
	klog.SetSlogLogger(log)
	identity := firstOf(o.identity, os.Getenv("POD_NAME"))
	if identity == "" {
		if identity, err = os.Hostname(); err != nil {
			return withCode(ExitError, fmt.Errorf("--identity: none given and no hostname: %w", err))
		}
	}
	ns := firstOf(o.leaseNamespace, os.Getenv("POD_NAMESPACE"), "ghostwatch")
	client, server, err := kube.ClientFromFlags(o.kubeFlags)
	if err != nil {
		return withCode(ExitError, err)
	}
	// An API server it cannot reach at start is an error that says so:
	// the replica restarts (CrashLoopBackOff shows why) rather than stand
	// by for a Lease it can never read. Later outages are the leader
	// election's to ride out.
	if err := reachable(ctx, client); err != nil {
		return withCode(ExitError, fmt.Errorf("controller: the API server at %s: %w", server, err))
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	c := controller.New(controller.Config{
		Client: client, Identity: identity, LeaseNamespace: ns, LeaseName: o.leaseName,
		Rules: rules, Metrics: controller.NewMetrics(reg, rules),
		Events: broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "ghostwatch-controller"}),
		Log:    log,
	})
	stopServing, err := serveHTTP(o.listen, c.Handler(reg), log)
	if err != nil {
		return withCode(ExitError, err)
	}
	log.Info("controller starting", "identity", identity, "lease", ns+"/"+o.leaseName, "apiServer", server, "rules", rule.IDs(rules))
	runErr := c.Run(ctx)
	log.Info("controller stopping", "reason", context.Cause(ctx), "err", runErr)
	stopServing()
	if runErr != nil {
		return withCode(ExitError, fmt.Errorf("controller: %w", runErr))
	}
	return nil
}

// reachable asks the API server its version, within 30 seconds.
func reachable(ctx context.Context, client kubernetes.Interface) error {
	done := make(chan error, 1)
	go func() {
		_, err := client.Discovery().ServerVersion()
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		return errors.New("no answer within 30s")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// firstOf returns the first non-empty string.
func firstOf(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
