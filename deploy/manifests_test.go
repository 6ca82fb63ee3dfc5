package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/ghostwatch/ghostwatch/cli"
	"github.com/ghostwatch/ghostwatch/internal/kubeauth"
	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/source/kube/fresh"
	"github.com/ghostwatch/ghostwatch/source/kube/live"
)

func TestKustomizationListsEveryFile(t *testing.T) {
	for _, dir := range []string{AgentDir, ControllerDir} {
		res, err := Resources(dir)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Files(dir)
		if err != nil {
			t.Fatal(err)
		}
		sort.Strings(res)
		if !slices.Equal(res, got) {
			t.Errorf("deploy/%s: kustomization lists %v, the directory holds %v", dir, res, got)
		}
	}
}

// The namespace is deploy/namespace's alone: neither component's
// kustomization holds it, so that deleting one leaves the other's objects.
func TestNamespaceIsItsOwn(t *testing.T) {
	b, err := files.ReadFile("namespace/namespace.yaml")
	if err != nil {
		t.Fatal(err)
	}
	obj, err := decode(b)
	if err != nil || obj.GetObjectKind().GroupVersionKind().Kind != "Namespace" {
		t.Fatalf("deploy/namespace/namespace.yaml: %v, %v", obj, err)
	}
	if res, err := Resources("namespace"); err != nil || !slices.Equal(res, []string{"namespace.yaml"}) {
		t.Errorf("deploy/namespace lists %v, %v", res, err)
	}
	for _, read := range []func() ([]Manifest, error){Agent, Controller} {
		ms, err := read()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if m.Object.GetObjectKind().GroupVersionKind().Kind == "Namespace" {
				t.Errorf("%s holds a Namespace: deleting that component would delete the other's", m.File)
			}
		}
	}
}

func TestControllerManifests(t *testing.T) {
	ms, err := Controller()
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, m := range ms {
		kinds[m.Object.GetObjectKind().GroupVersionKind().Kind]++
	}
	for _, k := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment", "Service", "PodDisruptionBudget"} {
		if kinds[k] != 1 {
			t.Errorf("want one %s, found %d", k, kinds[k])
		}
	}
	d, err := ControllerDeployment()
	if err != nil {
		t.Fatal(err)
	}
	spec := d.Spec.Template.Spec
	c := spec.Containers[0]
	sc := c.SecurityContext
	switch {
	case spec.HostNetwork || spec.HostPID || spec.HostIPC:
		t.Error("the controller needs no host namespace")
	case len(spec.Volumes) != 0 || len(c.VolumeMounts) != 0:
		t.Error("the controller needs no volume")
	case sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("the controller must run as non-root on a read-only root")
	case sc.Capabilities == nil || len(sc.Capabilities.Add) != 0 || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}):
		t.Errorf("capabilities %+v, want all dropped, none added", sc.Capabilities)
	case len(c.Args) == 0 || c.Args[0] != "controller":
		t.Errorf("args %v do not start with controller", c.Args)
	case d.Spec.Replicas == nil || *d.Spec.Replicas < 2:
		t.Error("one replica: a standby takes over only if there is one")
	}
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if env["POD_NAME"] != "metadata.name" || env["POD_NAMESPACE"] != "metadata.namespace" {
		t.Errorf("env %v: the identity and the Lease's namespace come from the downward API", env)
	}
	if port := strconv.Itoa(cli.ControllerPort); !slices.Contains(c.Args, "--listen=:"+port) || !hasPort(c.Ports, port) {
		t.Errorf("args %v, ports %v: want --listen=:%s, the binary's default, and that container port", c.Args, c.Ports, port)
	}
}

// The controller's roles grant what it uses: what its leader watches
// (every Pod and Node, Calico's ledger), listed and watched; Events; and
// its Lease in its own namespace. Nothing more.
func TestControllerRolesGrantExactlyWhatTheControllerUses(t *testing.T) {
	cr, err := ControllerClusterRole()
	if err != nil {
		t.Fatal(err)
	}
	r, err := ControllerRole()
	if err != nil {
		t.Fatal(err)
	}
	// record.EventSinkImpl creates an Event, then patches its count.
	clusterWide := []string{"/events/create", "/events/patch"}
	for _, gr := range cli.ControllerWatched() {
		clusterWide = append(clusterWide, gr.Group+"/"+gr.Resource+"/list", gr.Group+"/"+gr.Resource+"/watch")
	}
	if !slices.Contains(clusterWide, "crd.projectcalico.org/ipamblocks/watch") || !slices.Contains(clusterWide, "/nodes/list") {
		t.Fatalf("the controller watches %v: no Calico blocks or Nodes", cli.ControllerWatched())
	}
	for name, c := range map[string]struct {
		got  map[string]bool
		want []string
	}{
		"ClusterRole " + cr.Name: {grants(t, cr.Rules), clusterWide},
		// client-go's Lease lock gets, creates and updates its Lease.
		"Role " + r.Name: {grants(t, r.Rules), []string{"coordination.k8s.io/leases/get", "coordination.k8s.io/leases/create", "coordination.k8s.io/leases/update"}},
	} {
		want := map[string]bool{}
		for _, w := range c.want {
			want[w] = true
			if !c.got[w] {
				t.Errorf("%s lacks %s", name, w)
			}
		}
		for g := range c.got {
			if !want[g] {
				t.Errorf("%s grants %s, which the controller does not use", name, g)
			}
		}
	}
}

func TestAgentManifestsDecodeStrictly(t *testing.T) {
	ms, err := Agent()
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, m := range ms {
		kind := m.Object.GetObjectKind().GroupVersionKind().Kind
		kinds[kind]++
		meta, ok := m.Object.(metav1.Object)
		if !ok {
			t.Fatalf("%s: %T has no metadata", m.File, m.Object)
		}
		switch kind {
		case "Namespace", "ClusterRole", "ClusterRoleBinding":
		default:
			if meta.GetNamespace() != "ghostwatch" {
				t.Errorf("%s: %s %s in namespace %q, want ghostwatch", m.File, kind, meta.GetName(), meta.GetNamespace())
			}
		}
	}
	for _, k := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet", "Service"} {
		if kinds[k] != 1 {
			t.Errorf("want one %s, found %d", k, kinds[k])
		}
	}
}

func TestStrictDecodingRejectsUnknownFields(t *testing.T) {
	// The check the manifests pass must be able to fail.
	codecTest := []byte("apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: x\nspec:\n  nope: 1\n")
	if _, err := decode(codecTest); err == nil || !strings.Contains(err.Error(), "unknown field") {
		t.Fatalf("decode with an unknown field: %v, want an unknown field error", err)
	}
}

func TestAgentDaemonSetHasOnlyNetAdmin(t *testing.T) {
	ds, err := AgentDaemonSet()
	if err != nil {
		t.Fatal(err)
	}
	spec := ds.Spec.Template.Spec
	if !spec.HostNetwork {
		t.Error("hostNetwork is false: the agent must see the node's conntrack table")
	}
	if spec.HostPID || spec.HostIPC {
		t.Error("hostPID or hostIPC set: the agent needs neither")
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatal("the container sets no capabilities")
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("privileged: true")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem is not true")
	}
	if !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_ADMIN"}) {
		t.Errorf("capabilities.add = %v, want [NET_ADMIN] alone", sc.Capabilities.Add)
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("capabilities.drop = %v, want [ALL]", sc.Capabilities.Drop)
	}
	// Only host-local's store, the CNI configurations and Calico's
	// nodename file, read-only, where
	// --host-root reads them.
	wantMounts := map[string]string{"/host/etc/cni/net.d": "/etc/cni/net.d", "/host/var/lib/cni": "/var/lib/cni", "/host/var/lib/calico": "/var/lib/calico"}
	hostPaths := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	for _, v := range c.VolumeMounts {
		if want, ok := wantMounts[v.MountPath]; !ok || hostPaths[v.Name] != want || !v.ReadOnly {
			t.Errorf("volume mount %s (host path %q, read-only %v): the agent reads only %v, read-only", v.MountPath, hostPaths[v.Name], v.ReadOnly, wantMounts)
		}
		delete(wantMounts, v.MountPath)
	}
	if len(wantMounts) > 0 {
		t.Errorf("missing mounts: %v", wantMounts)
	}
	if !slices.Contains(c.Args, "--host-root=/host") {
		t.Errorf("args %v do not read the mounts (--host-root=/host)", c.Args)
	}
	var nodeName bool
	for _, e := range c.Env {
		if e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName" {
			nodeName = true
		}
	}
	if !nodeName {
		t.Error("NODE_NAME is not set from spec.nodeName: the agent would fall back to the hostname")
	}
	if len(c.Args) == 0 || c.Args[0] != "agent" {
		t.Errorf("args %v do not start with agent", c.Args)
	}
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--remedy") || strings.HasPrefix(a, "--dry-run") {
			t.Errorf("args turn on a remedy (%s): it must be off by default", a)
		}
	}
	probes := map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe}
	for want, p := range probes {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != want {
			t.Errorf("probe for %s missing or on another path", want)
			continue
		}
		if port := p.HTTPGet.Port.String(); !hasPort(c.Ports, port) {
			t.Errorf("probe %s uses port %s, which the container does not declare", want, port)
		}
	}
	listen := ""
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--listen="); ok {
			listen = v
		}
	}
	if listen == "" {
		listen = fmt.Sprintf(":%d", cli.AgentPort)
	}
	if _, port, _ := strings.Cut(listen, ":"); !hasPort(c.Ports, port) {
		t.Errorf("--listen=%s but no container port %s", listen, port)
	}

	sas, err := only[*corev1.ServiceAccount](AgentDir, "ServiceAccount")
	if err != nil {
		t.Fatal(err)
	}
	if spec.ServiceAccountName != sas.Name {
		t.Errorf("serviceAccountName %q, the ServiceAccount is %q", spec.ServiceAccountName, sas.Name)
	}
	crb, err := only[*rbacv1.ClusterRoleBinding](AgentDir, "ClusterRoleBinding")
	if err != nil {
		t.Fatal(err)
	}
	role, err := AgentClusterRole()
	if err != nil {
		t.Fatal(err)
	}
	if crb.RoleRef.Kind != "ClusterRole" || crb.RoleRef.Name != role.Name {
		t.Errorf("binding refers to %s %s, want ClusterRole %s", crb.RoleRef.Kind, crb.RoleRef.Name, role.Name)
	}
	if len(crb.Subjects) != 1 || crb.Subjects[0].Kind != "ServiceAccount" || crb.Subjects[0].Name != sas.Name || crb.Subjects[0].Namespace != sas.Namespace {
		t.Errorf("binding subjects %+v, want the ServiceAccount %s/%s alone", crb.Subjects, sas.Namespace, sas.Name)
	}
}

func hasPort(ports []corev1.ContainerPort, p string) bool {
	for _, cp := range ports {
		if cp.Name == p || p == strconv.Itoa(int(cp.ContainerPort)) {
			return true
		}
	}
	return false
}

// grants expands rules into group/resource/verb triples.
func grants(t *testing.T, rules []rbacv1.PolicyRule) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, r := range rules {
		if len(r.NonResourceURLs) != 0 || len(r.ResourceNames) != 0 {
			t.Errorf("rule %+v: the agent needs neither nonResourceURLs nor resourceNames", r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					if g == "*" || res == "*" || v == "*" {
						t.Errorf("rule %+v: wildcard", r)
					}
					out[g+"/"+res+"/"+v] = true
				}
			}
		}
	}
	return out
}

func TestAgentClusterRoleGrantsExactlyWhatTheAgentUses(t *testing.T) {
	role, err := AgentClusterRole()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{
		// record.EventSinkImpl creates an Event, then patches its count.
		"/events/create": true,
		"/events/patch":  true,
	}
	for _, gr := range live.Watched() {
		for _, v := range []string{"list", "watch"} {
			want[gr.Group+"/"+gr.Resource+"/"+v] = true
		}
	}
	// The remedies' last re-check.
	for _, gr := range fresh.QuorumListed() {
		want[gr.Group+"/"+gr.Resource+"/list"] = true
	}
	// Who asks for what its node holds, and whether it may.
	for _, gr := range kubeauth.Reviews() {
		want[gr.Group+"/"+gr.Resource+"/create"] = true
	}
	got := grants(t, role.Rules)
	for k := range want {
		if !got[k] {
			t.Errorf("ClusterRole %s lacks %s", role.Name, k)
		}
	}
	for k := range got {
		if !want[k] {
			t.Errorf("ClusterRole %s grants %s, which the agent does not use", role.Name, k)
		}
	}
}

// The alerting rules parse, and use only metrics ghostwatch exports: the
// gossip rules the controller's, the others the agent's or the
// controller's.
func TestAlertRulesUseExportedMetrics(t *testing.T) {
	byController, byEither := exportedMetrics(t)
	for file, exported := range map[string]map[string]bool{"alerts/gossip.rules.yaml": byController, "alerts/ghostwatch.rules.yaml": byEither} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var f struct {
			Groups []struct {
				Name  string
				Rules []struct {
					Alert, Expr, For string
					Labels           map[string]string
					Annotations      map[string]string
				}
			}
		}
		if err := yaml.Unmarshal(b, &f); err != nil {
			t.Fatal(err)
		}
		used := regexp.MustCompile(`ghostwatch_[a-z_]+`)
		n := 0
		for _, g := range f.Groups {
			for _, r := range g.Rules {
				n++
				if r.Alert == "" || strings.TrimSpace(r.Expr) == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
					t.Errorf("%s: rule %+v: want alert, expr, a severity label and a summary", file, r)
				}
				for _, m := range used.FindAllString(r.Expr, -1) {
					if !exported[m] {
						t.Errorf("%s: %s uses %s, which ghostwatch does not export", file, r.Alert, m)
					}
				}
				if u := r.Annotations["runbook_url"]; u != "" {
					doc, anchor, _ := strings.Cut(strings.TrimPrefix(u, "https://github.com/ghostwatch/ghostwatch/blob/main/"), "#")
					b, err := os.ReadFile(filepath.Join("..", doc))
					if err != nil {
						t.Errorf("%s: %s links %s, which the repository does not hold", file, r.Alert, u)
					} else if anchor != "" && !slices.Contains(headingAnchors(string(b)), anchor) {
						t.Errorf("%s: %s links %s, which has no heading #%s", file, r.Alert, doc, anchor)
					}
				} else {
					t.Errorf("%s: %s links no runbook", file, r.Alert)
				}
			}
		}
		if n < 3 {
			t.Errorf("%s: %d rules", file, n)
		}
	}
}

// promtool, Prometheus's own, checks the rules and fires each alert from
// series and keeps it quiet (alerts/tests/*.test.yaml).
func TestAlertRulesWithPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		testenv.Unavailable(t, "promtool is not installed (Debian: apt-get install prometheus; scripts/test.sh does it)")
		return
	}
	rules, _ := filepath.Glob("alerts/*.rules.yaml")
	tests, _ := filepath.Glob("alerts/tests/*.test.yaml")
	if len(rules) < 2 || len(tests) < 2 {
		t.Fatalf("rules %v, tests %v", rules, tests)
	}
	for _, args := range [][]string{append([]string{"check", "rules"}, rules...), append([]string{"test", "rules"}, tests...)} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// headingAnchors lists the anchors GitHub gives the headings of a
// Markdown page: lower case, spaces as dashes, punctuation dropped.
func headingAnchors(page string) []string {
	var out []string
	for _, l := range strings.Split(page, "\n") {
		h := strings.TrimLeft(l, "#")
		if len(h) == len(l) || !strings.HasPrefix(h, " ") {
			continue
		}
		var a strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(h)) {
			switch {
			case r == ' ':
				a.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				a.WriteRune(r)
			}
		}
		out = append(out, a.String())
	}
	return out
}
