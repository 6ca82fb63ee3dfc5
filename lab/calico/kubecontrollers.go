package calico

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ghostwatch/ghostwatch/lab/controlplane"
)

// KubeControllersOptions configure StartKubeControllers.
type KubeControllersOptions struct {
	// LeakGracePeriod is the node controller's
	// spec.controllers.node.leakGracePeriod: how long an allocation it
	// judges leaked (pod gone, on another node, or without the address)
	// stays a candidate before it frees it. Its IPAM scan runs every half
	// of it, so an allocation is freed one grace period, plus up to half of
	// one, after the first scan that judged it. Calico's default is 15m;
	// tests want seconds. Zero means 15m.
	LeakGracePeriod time.Duration
	// LogLevel is the controllers' logSeverityScreen (default Info, which
	// logs every candidate, confirmed and collected leak).
	LogLevel string
}

// KubeControllers is calico-kube-controllers running the node controller
// (which holds the IPAM garbage collector) against the cluster.
type KubeControllers struct {
	*controlplane.Process
	statusFile string
}

// startTimeout bounds the wait for kube-controllers to report its datastore
// initialised.
const startTimeout = time.Minute

// Configure stores o as the KubeControllersConfiguration "default", as
// calico-kube-controllers creates it at its first start. calicoctl ipam
// check reads it too, and fails without it.
func (c *Cluster) Configure(ctx context.Context, o KubeControllersOptions) error {
	if o.LeakGracePeriod == 0 {
		o.LeakGracePeriod = 15 * time.Minute
	}
	if o.LogLevel == "" {
		o.LogLevel = "Info"
	}
	return c.Apply(ctx, fmt.Sprintf(`apiVersion: projectcalico.org/v3
kind: KubeControllersConfiguration
metadata:
  name: default
spec:
  logSeverityScreen: %s
  healthChecks: Enabled
  prometheusMetricsPort: 0
  controllers:
    node:
      leakGracePeriod: %s
`, o.LogLevel, o.LeakGracePeriod))
}

// StartKubeControllers stores o (Configure) and starts
// calico-kube-controllers with only the node controller enabled, as
// Calico's manifests run it for the kubernetes datastore but for the other
// controllers, which the IPAM garbage collector does not need. It returns
// once the process reports its datastore initialised (its status file);
// the IPAM scan starts when its syncer is in sync, a moment later. The
// control plane's Stop stops it.
//
// The configuration is written before the process starts because
// kube-controllers exits (to be restarted) whenever it changes.
func (c *Cluster) StartKubeControllers(ctx context.Context, o KubeControllersOptions) (*KubeControllers, error) {
	if err := c.Configure(ctx, o); err != nil {
		return nil, err
	}
	statusFile := filepath.Join(c.Dir, "kube-controllers-status.json")
	p, err := c.cp.Run("calico-kube-controllers", append(c.datastoreEnv(),
		// Only the node controller: it runs the IPAM garbage collector.
		"ENABLED_CONTROLLERS=node",
	), filepath.Join(c.bin, "calico-kube-controllers"), "-status-file="+statusFile)
	if err != nil {
		return nil, err
	}
	k := &KubeControllers{Process: p, statusFile: statusFile}
	if err := p.WaitFor(ctx, startTimeout, "initialised", func(context.Context) error {
		return k.ready("Startup")
	}); err != nil {
		p.Stop(10 * time.Second)
		return nil, err
	}
	return k, nil
}

// ready is nil when the status file reports every key ready.
func (k *KubeControllers) ready(keys ...string) error {
	b, err := os.ReadFile(k.statusFile)
	if err != nil {
		return err
	}
	var st struct {
		Readiness map[string]struct {
			Ready  bool
			Reason string
		}
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("status file %s: %w", k.statusFile, err)
	}
	for _, key := range keys {
		r, ok := st.Readiness[key]
		if !ok || !r.Ready {
			return fmt.Errorf("%s not ready: %s", key, r.Reason)
		}
	}
	return nil
}

// Logged reports whether the process's log has a line holding every one of
// words, as kube-controllers logs its IPAM decisions (a message followed by
// the allocation's fields, ip=… handle=… node=… pod=…).
func (k *KubeControllers) Logged(words ...string) (bool, error) {
	b, err := os.ReadFile(k.Log())
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		all := true
		for _, w := range words {
			if !strings.Contains(line, w) {
				all = false
				break
			}
		}
		if all {
			return true, nil
		}
	}
	return false, nil
}
