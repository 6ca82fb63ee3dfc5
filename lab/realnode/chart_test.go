package realnode

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/lab/controlplane"
)

// The chart, installed with Helm's own library from the release image as
// scripts/dist.sh writes it, runs on the real node as an SRE first meets
// it: the agent's DaemonSet pod and both controller replicas are
// containers under the chart's securityContext, reading the node through
// their mounts and the API server through the kubernetes Service, ready by
// their own probes; one replica leads.
func TestChartOnRealNode(t *testing.T) {
	start := time.Now()
	l := startLab(t, withReleaseImage)
	t.Logf("the node ready, the images imported: %s", time.Since(start).Round(time.Millisecond))
	ctx := context.Background()
	kubeconfig, err := l.cp.WriteKubeconfig(controlplane.UserAdmin)
	if err != nil {
		t.Fatal(err)
	}
	values := l.chartValues()
	installed := time.Now()
	if _, err := InstallChart(ctx, kubeconfig, "gw", "ghostwatch", values, t.Logf); err != nil {
		t.Fatal(err)
	}
	l.allReady(t, "ghostwatch", 3)
	t.Logf("installed to every pod Ready: %s", time.Since(installed).Round(time.Millisecond))
}

// chartValues are the chart's values for the lab's node, as an SRE would
// write them for a cluster whose nodes keep their CNI files in other
// places: the lab's image, and where the node keeps its CNI
// configurations and host-local's stores; withMonitoring, the
// ServiceMonitors and PrometheusRule too. They end inside agent:, for a
// caller to add to.
func (l *lab) chartValues() string {
	v := fmt.Sprintf("image: {tag: %s, pullPolicy: Never}\nagent:\n  hostLocalDataDir: %s\n  cniConfDir: %s\n",
		LabVersion, filepath.Dir(l.node.HostLocalDir), l.node.CNIConfDir())
	if l.monitored {
		v = monitoringValues + v
	}
	return v
}
