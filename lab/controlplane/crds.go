package controlplane

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

// crdResource is the API server's CustomResourceDefinition resource.
var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// crdEstablishTimeout bounds the wait for one CRD to be served. The API
// server establishes a CRD within a second or two; more means it refused
// the names.
const crdEstablishTimeout = 30 * time.Second

// InstallCRDs creates every CustomResourceDefinition in fsys's *.yaml files
// (one object per file, at the top of fsys) and returns once the API server
// reports each Established, so that clients may use the resources at once.
// It returns the CRDs' names, in the files' order. A CRD that already
// exists is left as it is.
func (cp *ControlPlane) InstallCRDs(ctx context.Context, fsys fs.FS) ([]string, error) {
	files, err := fs.Glob(fsys, "*.yaml")
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no *.yaml CustomResourceDefinition in %v", fsys)
	}
	dyn, err := dynamic.NewForConfig(cp.Config(UserAdmin))
	if err != nil {
		return nil, err
	}
	crds := dyn.Resource(crdResource)
	var names []string
	for _, f := range files {
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, err
		}
		var obj unstructured.Unstructured
		if err := yaml.Unmarshal(b, &obj.Object); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if obj.GetKind() != "CustomResourceDefinition" {
			return nil, fmt.Errorf("%s: a %q, want a CustomResourceDefinition", path.Base(f), obj.GetKind())
		}
		if _, err := crds.Create(ctx, &obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("%s: creating CRD %s: %w", f, obj.GetName(), err)
		}
		names = append(names, obj.GetName())
	}
	for _, name := range names {
		if err := waitEstablished(ctx, crds, name); err != nil {
			return nil, err
		}
	}
	return names, nil
}

// waitEstablished polls the CRD until its Established condition is True;
// NamesAccepted False ends the wait at once.
func waitEstablished(ctx context.Context, crds dynamic.ResourceInterface, name string) error {
	ctx, cancel := context.WithTimeout(ctx, crdEstablishTimeout)
	defer cancel()
	var last string
	for {
		obj, err := crds.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
		} else {
			conds := crdConditions(obj)
			if c, ok := conds["NamesAccepted"]; ok && c.status == "False" {
				return fmt.Errorf("CRD %s: names not accepted: %s: %s", name, c.reason, c.message)
			}
			if conds["Established"].status == "True" {
				return nil
			}
			last = fmt.Sprintf("conditions %v", slices.Sorted(maps.Keys(conds)))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("CRD %s not Established after %s (%s)", name, crdEstablishTimeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

type crdCondition struct{ status, reason, message string }

// crdConditions reads status.conditions by type.
func crdConditions(obj *unstructured.Unstructured) map[string]crdCondition {
	out := map[string]crdCondition{}
	list, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range list {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		str := func(k string) string { s, _ := m[k].(string); return s }
		out[str("type")] = crdCondition{status: str("status"), reason: str("reason"), message: str("message")}
	}
	return out
}
