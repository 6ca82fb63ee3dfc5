// Package deploy holds the manifests that install ghostwatch on a cluster
// (`kubectl apply -k deploy/agent`) and reads them back as typed objects, so
// that tests can hold them to what the binary needs and promises: the
// DaemonSet's flags parse, its capabilities are CAP_NET_ADMIN alone, and its
// ClusterRole grants exactly what the agent reads and writes.
package deploy

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

//go:embed agent/*.yaml controller/*.yaml namespace/*.yaml kind/*.yaml
var files embed.FS

// AgentDir and ControllerDir are the kustomization directories of the
// agent and the controller, relative to deploy/; NamespaceDir the
// namespace's, applied first.
const (
	AgentDir      = "agent"
	ControllerDir = "controller"
	NamespaceDir  = "namespace"
	// KindDir is the agent's kustomization for kind clusters, in place of
	// AgentDir's.
	KindDir = "kind"
)

// Manifest is one object of a kustomization, with the file it came from.
type Manifest struct {
	File   string
	Object runtime.Object
}

// Agent decodes every resource the agent's kustomization lists, strictly:
// an unknown or duplicated field is an error that names the file.
func Agent() ([]Manifest, error) {
	return read(AgentDir)
}

// Namespace decodes the namespace's kustomization, as Agent does.
func Namespace() ([]Manifest, error) {
	return read(NamespaceDir)
}

// AgentInstall is what installing the agent applies, in order: the
// namespace's kustomization, then the agent's.
func AgentInstall() ([]Manifest, error) {
	ns, err := Namespace()
	if err != nil {
		return nil, err
	}
	a, err := Agent()
	if err != nil {
		return nil, err
	}
	return append(ns, a...), nil
}

// Controller decodes every resource the controller's kustomization lists,
// as Agent does.
func Controller() ([]Manifest, error) {
	return read(ControllerDir)
}

func read(dir string) ([]Manifest, error) {
	resources, err := Resources(dir)
	if err != nil {
		return nil, err
	}
	var out []Manifest
	for _, r := range resources {
		name := path.Join(dir, r)
		b, err := files.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("deploy/%s: listed in the kustomization but %w", name, err)
		}
		obj, err := decode(b)
		if err != nil {
			return nil, fmt.Errorf("deploy/%s: %w", name, err)
		}
		out = append(out, Manifest{File: name, Object: obj})
	}
	return out, nil
}

// decode reads one object, refusing unknown and duplicated fields.
func decode(b []byte) (runtime.Object, error) {
	obj, _, err := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer().Decode(b, nil, nil)
	return obj, err
}

// Resources is the resources list of dir's kustomization.yaml.
func Resources(dir string) ([]string, error) {
	b, err := files.ReadFile(path.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, fmt.Errorf("deploy/%s: %w", dir, err)
	}
	var k struct {
		Namespace string   `json:"namespace"`
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		return nil, fmt.Errorf("deploy/%s/kustomization.yaml: %w", dir, err)
	}
	return k.Resources, nil
}

// Files lists the YAML files of dir other than its kustomization, sorted.
func Files(dir string) ([]string, error) {
	entries, err := fs.ReadDir(files, dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if n := e.Name(); strings.HasSuffix(n, ".yaml") && n != "kustomization.yaml" {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}

// AgentDaemonSet is the agent's DaemonSet.
func AgentDaemonSet() (*appsv1.DaemonSet, error) {
	return only[*appsv1.DaemonSet](AgentDir, "DaemonSet")
}

// AgentClusterRole is the agent's ClusterRole.
func AgentClusterRole() (*rbacv1.ClusterRole, error) {
	return only[*rbacv1.ClusterRole](AgentDir, "ClusterRole")
}

// ControllerDeployment is the controller's Deployment.
func ControllerDeployment() (*appsv1.Deployment, error) {
	return only[*appsv1.Deployment](ControllerDir, "Deployment")
}

// ControllerClusterRole is the controller's ClusterRole.
func ControllerClusterRole() (*rbacv1.ClusterRole, error) {
	return only[*rbacv1.ClusterRole](ControllerDir, "ClusterRole")
}

// ControllerRole is the controller's Role in its own namespace (its Lease).
func ControllerRole() (*rbacv1.Role, error) {
	return only[*rbacv1.Role](ControllerDir, "Role")
}

func only[T runtime.Object](dir, kind string) (T, error) {
	var zero T
	ms, err := read(dir)
	if err != nil {
		return zero, err
	}
	var found []T
	for _, m := range ms {
		if o, ok := m.Object.(T); ok {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		return zero, fmt.Errorf("deploy/%s: want one %s, found %d", dir, kind, len(found))
	}
	return found[0], nil
}
