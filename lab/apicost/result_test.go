package apicost

import (
	"strings"
	"testing"
)

func TestParseStatus(t *testing.T) {
	const status = `Name:	kube-proxy
VmPeak:	 1300188 kB
VmHWM:	   70188 kB
VmRSS:	   64892 kB
Threads:	12
`
	m, err := parseStatus(strings.NewReader(status))
	if err != nil || m.rss != 64892*1024 || m.hwm != 70188*1024 {
		t.Errorf("%+v, %v", m, err)
	}
	if _, err := parseStatus(strings.NewReader("VmRSS:\t12 MB\n")); err == nil {
		t.Error("a size in MB was read as kB")
	}
}

func TestLines(t *testing.T) {
	r := &Result{Sizes: DefaultSizes(), Clients: []ClientResult{
		{Name: ClientKubeProxy, RSSAfterSync: 50 << 20, Phases: []PhaseCost{{Phase: "start", Received: 1000}, {Phase: "churn", Received: 400}}},
		{Name: ClientAgent, RSSAfterSync: 300 << 20, Phases: []PhaseCost{{Phase: "start", Received: 10000}, {Phase: "churn", Received: 8200}}},
	}}
	lines := strings.Join(r.Lines(), "\n") + "\n"
	for _, want := range []string{
		"pods=15000\n", "nodes=100\n", "services=500\n", "replacements=1000\n",
		"agent_api_bytes_ratio_vs_kube_proxy_start=10.00\n",
		"agent_api_bytes_ratio_vs_kube_proxy=20.50\n",
		"agent_rss_after_sync_bytes=314572800\n",
		"kube_proxy_rss_after_sync_bytes=52428800\n",
	} {
		if !strings.Contains(lines, want) {
			t.Errorf("no %q in:\n%s", want, lines)
		}
	}
	var text strings.Builder
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(text.String(), lines) {
		t.Errorf("the text does not end with the lines:\n%s", text.String())
	}
}
