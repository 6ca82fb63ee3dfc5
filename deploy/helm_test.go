package deploy

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/ghostwatch/ghostwatch/cli"
	"github.com/ghostwatch/ghostwatch/deploy/chart"
	"github.com/ghostwatch/ghostwatch/internal/buildinfo"
)

// rendered is one object the chart renders.
type rendered struct {
	Kind     string
	Metadata struct {
		Name, Namespace string
		Labels          map[string]string
	}
	raw []byte
}

// render renders the chart with values (YAML), as `helm template` does,
// checking them against values.schema.json first (chart.Render).
func render(t *testing.T, values string) ([]rendered, error) {
	t.Helper()
	objs, err := chart.Render("gw", "ghostwatch", values)
	if err != nil {
		return nil, err
	}
	var out []rendered
	for _, o := range objs {
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		r := rendered{Kind: o.GetKind(), raw: b}
		r.Metadata.Name, r.Metadata.Namespace, r.Metadata.Labels = o.GetName(), o.GetNamespace(), o.GetLabels()
		out = append(out, r)
	}
	return out, nil
}

func find(objs []rendered, kind, name string) *rendered {
	for i := range objs {
		if objs[i].Kind == kind && objs[i].Metadata.Name == name {
			return &objs[i]
		}
	}
	return nil
}

func decodeAs[T any](t *testing.T, r *rendered) *T {
	t.Helper()
	if r == nil {
		t.Fatal("object not rendered")
	}
	var v T
	if err := yaml.UnmarshalStrict(r.raw, &v); err != nil {
		t.Fatalf("%s %s: %v", r.Kind, r.Metadata.Name, err)
	}
	return &v
}

// The chart in its value variants: defaults (report only), every remedy
// on, kind's host-local store, monitoring on; each renders objects the
// API's types decode strictly, and what each variant turns on is there,
// and nothing more.
func TestChartRendersItsVariants(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values string
		check  func(t *testing.T, objs []rendered)
	}{
		{"defaults", "", func(t *testing.T, objs []rendered) {
			ds := decodeAs[appsv1.DaemonSet](t, find(objs, "DaemonSet", "gw-agent"))
			c := ds.Spec.Template.Spec.Containers[0]
			if want := fmt.Sprintf("--listen=:%d", cli.AgentPort); !slices.Contains(c.Args, want) || c.Ports[0].ContainerPort != cli.AgentPort {
				t.Errorf("agent args %v, ports %v: want %s, the binary's default port", c.Args, c.Ports, want)
			}
			if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--remedy") }) {
				t.Errorf("a remedy on by default: %v", c.Args)
			}
			for _, m := range c.VolumeMounts {
				if !m.ReadOnly {
					t.Errorf("the agent mounts %s read-write by default", m.MountPath)
				}
			}
			dep := decodeAs[appsv1.Deployment](t, find(objs, "Deployment", "gw-controller"))
			spec := dep.Spec.Template.Spec
			if want := fmt.Sprintf("--listen=:%d", cli.ControllerPort); !slices.Contains(spec.Containers[0].Args, want) {
				t.Errorf("controller args %v: want %s, the binary's default port", spec.Containers[0].Args, want)
			}
			if *dep.Spec.Replicas != 2 || spec.Affinity == nil || spec.Affinity.PodAntiAffinity == nil || spec.PriorityClassName != "system-cluster-critical" {
				t.Errorf("controller: %d replicas, affinity %+v, priority %q", *dep.Spec.Replicas, spec.Affinity, spec.PriorityClassName)
			}
			if find(objs, "PodDisruptionBudget", "gw-controller") == nil {
				t.Error("no PodDisruptionBudget for the controller")
			}
			for _, k := range []string{"ServiceMonitor", "PrometheusRule", "ConfigMap", "NetworkPolicy"} {
				for _, o := range objs {
					if o.Kind == k {
						t.Errorf("%s %s rendered by default", k, o.Metadata.Name)
					}
				}
			}
		}},
		{"every remedy on", "agent: {remedies: [stale-nat-flow, hostlocal-reserve], dryRun: true}\ncontroller:\n  remedies: [gossip-force-leave]\n  gossipClusters:\n  - {system: consul, namespace: shop, scheme: https, tokenSecret: {name: ghostwatch-consul, key: token}}\n", func(t *testing.T, objs []rendered) {
			ds := decodeAs[appsv1.DaemonSet](t, find(objs, "DaemonSet", "gw-agent"))
			c := ds.Spec.Template.Spec.Containers[0]
			for _, want := range []string{"--remedy=stale-nat-flow", "--remedy=hostlocal-reserve", "--dry-run"} {
				if !slices.Contains(c.Args, want) {
					t.Errorf("agent args %v lack %s", c.Args, want)
				}
			}
			// hostlocal-reserve writes host-local's store, and nothing else.
			var rw []string
			for _, m := range c.VolumeMounts {
				if !m.ReadOnly {
					rw = append(rw, m.MountPath)
				}
			}
			if !slices.Equal(rw, []string{"/host/var/lib/cni/networks"}) {
				t.Errorf("read-write mounts %v, want host-local's store alone", rw)
			}
			dep := decodeAs[appsv1.Deployment](t, find(objs, "Deployment", "gw-controller"))
			args := dep.Spec.Template.Spec.Containers[0].Args
			if !slices.Contains(args, "--remedy=gossip-force-leave") || !slices.Contains(args, "--gossip-clusters=/etc/ghostwatch/gossip-clusters.yaml") {
				t.Errorf("controller args %v", args)
			}
			role := decodeAs[rbacv1.Role](t, find(objs, "Role", "gw-controller-gossip-consul-consul"))
			if role.Namespace != "shop" || len(role.Rules) != 1 || !slices.Equal(role.Rules[0].ResourceNames, []string{"ghostwatch-consul"}) || !slices.Equal(role.Rules[0].Verbs, []string{"get"}) {
				t.Errorf("the token's Role: %+v", role)
			}
			cm := decodeAs[corev1.ConfigMap](t, find(objs, "ConfigMap", "gw-controller-gossip-clusters"))
			if !strings.Contains(cm.Data["gossip-clusters.yaml"], "ghostwatch-consul") {
				t.Errorf("gossip clusters: %q", cm.Data["gossip-clusters.yaml"])
			}
		}},
		{"the agent on the node's InternalIP alone", "agent: {listenOnHostIP: true}\n", func(t *testing.T, objs []rendered) {
			ds := decodeAs[appsv1.DaemonSet](t, find(objs, "DaemonSet", "gw-agent"))
			c := ds.Spec.Template.Spec.Containers[0]
			if want := fmt.Sprintf("--listen=[$(HOST_IP)]:%d", cli.AgentPort); !slices.Contains(c.Args, want) {
				t.Errorf("agent args %v lack %s", c.Args, want)
			}
			if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
				return e.Name == "HOST_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.hostIP"
			}) {
				t.Errorf("no HOST_IP from status.hostIP in %+v", c.Env)
			}
		}},
		{"kind: host-local under /run/cni-ipam-state", "agent: {hostLocalDataDir: /run/cni-ipam-state}\n", func(t *testing.T, objs []rendered) {
			ds := decodeAs[appsv1.DaemonSet](t, find(objs, "DaemonSet", "gw-agent"))
			i := slices.IndexFunc(ds.Spec.Template.Spec.Containers[0].VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/host/run/cni-ipam-state" })
			if i < 0 || !ds.Spec.Template.Spec.Containers[0].VolumeMounts[i].ReadOnly {
				t.Errorf("kind's store not mounted read-only: %+v", ds.Spec.Template.Spec.Containers[0].VolumeMounts)
			}
		}},
		{"k3s: CNI configurations elsewhere", "agent: {cniConfDir: /var/lib/rancher/k3s/agent/etc/cni/net.d}\n", func(t *testing.T, objs []rendered) {
			ds := decodeAs[appsv1.DaemonSet](t, find(objs, "DaemonSet", "gw-agent"))
			spec := ds.Spec.Template.Spec
			i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == "cni-conf" })
			if i < 0 || spec.Volumes[i].HostPath == nil || spec.Volumes[i].HostPath.Path != "/var/lib/rancher/k3s/agent/etc/cni/net.d" {
				t.Errorf("the CNI configurations are not read from k3s's directory: %+v", spec.Volumes)
			}
			if !slices.ContainsFunc(spec.Containers[0].VolumeMounts, func(m corev1.VolumeMount) bool {
				return m.Name == "cni-conf" && m.MountPath == "/host/etc/cni/net.d" && m.ReadOnly
			}) {
				t.Errorf("the agent does not read them read-only as /etc/cni/net.d: %+v", spec.Containers[0].VolumeMounts)
			}
		}},
		{"monitoring on", "prometheus: {monitor: {enabled: true}}\nprometheusRule: {enabled: true}\ndashboards: {enabled: true}\nnetworkPolicy: {enabled: true}\n", func(t *testing.T, objs []rendered) {
			for _, name := range []string{"gw-agent", "gw-controller"} {
				if find(objs, "ServiceMonitor", name) == nil {
					t.Errorf("no ServiceMonitor %s", name)
				}
			}
			rule := find(objs, "PrometheusRule", "gw-ghostwatch")
			if rule == nil {
				t.Fatal("no PrometheusRule")
			}
			var pr struct {
				Spec struct {
					Groups []struct {
						Rules []struct {
							Alert       string
							Annotations map[string]string
						}
					}
				}
			}
			if err := yaml.Unmarshal(rule.raw, &pr); err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, g := range pr.Spec.Groups {
				n += len(g.Rules)
			}
			if n != 17 {
				t.Errorf("the PrometheusRule holds %d alerts, want the 17 of deploy/alerts", n)
			}
			// Each alert's runbook at the chart's release.
			var meta struct{ AppVersion string }
			if b, err := os.ReadFile(filepath.Join(chart.Dir(), "Chart.yaml")); err != nil || yaml.Unmarshal(b, &meta) != nil {
				t.Fatalf("Chart.yaml: %v", err)
			}
			for _, g := range pr.Spec.Groups {
				for _, r := range g.Rules {
					if want := buildinfo.Repository + "/blob/" + meta.AppVersion + "/docs/runbooks/"; !strings.HasPrefix(r.Annotations["runbook_url"], want) {
						t.Errorf("%s: runbook %q, want one under %s", r.Alert, r.Annotations["runbook_url"], want)
					}
				}
			}
			cm := decodeAs[corev1.ConfigMap](t, find(objs, "ConfigMap", "gw-ghostwatch-dashboard"))
			if cm.Labels["grafana_dashboard"] != "1" || !strings.Contains(cm.Data["ghostwatch.json"], `"uid": "ghostwatch"`) {
				t.Errorf("dashboard ConfigMap labels %v", cm.Labels)
			}
			if find(objs, "NetworkPolicy", "gw-controller") == nil {
				t.Error("no NetworkPolicy")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := render(t, tc.values)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, objs)
		})
	}
}

// values.schema.json refuses what the chart cannot honour.
func TestChartSchemaRefusesBadValues(t *testing.T) {
	for _, values := range []string{
		"agent: {remedies: [delete-everything]}\n",
		"agent: {port: http}\n",
		"controller: {gossipClusters: [{system: zookeeper, namespace: shop}]}\n",
		"controller: {gossipClusters: [{system: consul, namespace: ../etc}]}\n",
		"agnet: {enabled: true}\n",
	} {
		if _, err := render(t, values); err == nil {
			t.Errorf("%q: rendered", values)
		}
	}
}

// The chart's copies of the alerting rules and the dashboard are
// deploy/alerts' and deploy/dashboards'.
func TestChartFilesAreTheDeployedOnes(t *testing.T) {
	for copy, orig := range map[string]string{
		"helm/ghostwatch/files/ghostwatch.rules.yaml": "alerts/ghostwatch.rules.yaml",
		"helm/ghostwatch/files/gossip.rules.yaml":     "alerts/gossip.rules.yaml",
		"helm/ghostwatch/files/ghostwatch.json":       "dashboards/ghostwatch.json",
	} {
		a, err := os.ReadFile(copy)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(orig)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs from %s: cp deploy/%s deploy/%s", filepath.Base(copy), orig, orig, copy)
		}
	}
}
