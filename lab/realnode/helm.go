package realnode

import (
	"context"
	"fmt"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/ghostwatch/ghostwatch/deploy/chart"
)

// InstallChart installs the chart of this checkout (deploy/helm/ghostwatch)
// as `helm install NAME --namespace NS --create-namespace -f VALUES` does,
// with Helm's own library, through kubeconfig: the release is recorded as
// Helm records it (a Secret), and its objects are created. It does not
// wait for them to be ready.
func InstallChart(ctx context.Context, kubeconfig, name, namespace, values string, logf func(string, ...any)) (*release.Release, error) {
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig, flags.Namespace = &kubeconfig, &namespace
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, namespace, "secret", logf); err != nil {
		return nil, fmt.Errorf("helm: %w", err)
	}
	ch, err := loader.Load(chart.Dir())
	if err != nil {
		return nil, fmt.Errorf("helm: loading the chart: %w", err)
	}
	vals, err := chartutil.ReadValues([]byte(values))
	if err != nil {
		return nil, fmt.Errorf("helm: values: %w", err)
	}
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace, install.CreateNamespace = name, namespace, true
	install.Timeout = 2 * time.Minute
	rel, err := install.RunWithContext(ctx, ch, vals.AsMap())
	if err != nil {
		return nil, fmt.Errorf("helm install %s: %w", name, err)
	}
	return rel, nil
}
