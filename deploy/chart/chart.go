// Package chart renders the Helm chart deploy/helm/ghostwatch with Helm's
// own library, as `helm template` does, for the tests that hold it to the
// real API server. Nothing in the production binary imports it.
package chart

import (
	"errors"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Dir is the chart's directory in this checkout.
func Dir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return filepath.Join("deploy", "helm", "ghostwatch")
	}
	return filepath.Join(filepath.Dir(file), "..", "helm", "ghostwatch")
}

// Render renders the chart as release name in namespace with values
// (YAML), checked against values.schema.json, into objects in the order
// of their template files.
func Render(name, namespace, values string) ([]*unstructured.Unstructured, error) {
	docs, err := RenderDocs(name, namespace, values)
	if err != nil {
		return nil, err
	}
	out := make([]*unstructured.Unstructured, 0, len(docs))
	for _, d := range docs {
		m := map[string]any{}
		if err := yaml.Unmarshal([]byte(d.Text), &m); err != nil {
			return nil, err
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out, nil
}

// Doc is one rendered object as the template wrote it, comments kept.
type Doc struct {
	Kind, Name, Text string
}

// RenderDocs renders the chart as Render does, and returns each object's
// text as its template wrote it.
func RenderDocs(name, namespace, values string) ([]Doc, error) {
	ch, err := loader.Load(Dir())
	if err != nil {
		return nil, err
	}
	vals, err := chartutil.ReadValues([]byte(values))
	if err != nil {
		return nil, err
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = chartutil.KubeVersion{Version: "v1.34.4", Major: "1", Minor: "34"}
	top, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: name, Namespace: namespace, IsInstall: true}, caps)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(ch, top)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	var out []Doc
	for _, n := range names {
		if !strings.HasSuffix(n, ".yaml") {
			continue
		}
		for _, doc := range strings.Split(files[n], "\n---") {
			var head struct {
				Kind     string
				Metadata struct{ Name string }
			}
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				return nil, errors.Join(errors.New(n), err)
			}
			if head.Kind == "" {
				continue
			}
			out = append(out, Doc{Kind: head.Kind, Name: head.Metadata.Name, Text: strings.TrimLeft(doc, "\n") + "\n"})
		}
	}
	return out, nil
}
