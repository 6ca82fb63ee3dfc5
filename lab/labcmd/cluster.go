package labcmd

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/ghostwatch/ghostwatch/internal/cmdline"
	"github.com/ghostwatch/ghostwatch/lab/build"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
	"github.com/ghostwatch/ghostwatch/lab/realnode"
)

// modulePath is ghostwatch's module: the cluster builds its images from
// a checkout of it.
const modulePath = "github.com/ghostwatch/ghostwatch"

func newClusterCommand(streams genericiooptions.IOStreams, b builder) *cobra.Command {
	var o realnode.ClusterOptions
	var remedies []string
	var dryRun, buildFlag bool
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Stand up real nodes with ghostwatch installed by its chart, for kubectl, until Ctrl-C",
		Long: `cluster stands up a Kubernetes cluster on this machine: the control plane
(etcd, kube-apiserver, kube-controller-manager, kube-scheduler) and one or two
real nodes, each with its own network namespace, containerd, kubelet, kube-proxy
and CNI (ptp and host-local, as kind's nodes). It builds ghostwatch's release
image from the checkout it runs in, installs the chart with Helm (report only,
unless --remedy), prints the kubeconfig and how to play each incident with
kubectl, and keeps the cluster until Ctrl-C, SIGTERM or SIGHUP, when it removes
it all. If it is killed, ghostwatch-lab cleanup --prefix gwn removes what it
left.

It needs root, a checkout of ghostwatch as its working directory (the images
are built from it), Debian's containerd and runc, and the Kubernetes binaries,
CNI plugins and crictl built into the cache (it asks to build what lacks, or
builds it with --build).

Two nodes share this machine's filesystem: the chart mounts node-1's CNI
configuration and host-local store on both, so node-2's agent reads node-1's.`,
		Example: `  sudo ghostwatch-lab cluster
  sudo ghostwatch-lab cluster --nodes 2 --remedy stale-nat-flow,hostlocal-reserve`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Nodes != 1 && o.Nodes != 2 {
				return cmdline.WithCode(cmdline.ExitError, fmt.Errorf("--nodes %d: want 1 or 2", o.Nodes))
			}
			for _, r := range remedies {
				if r != "stale-nat-flow" && r != "hostlocal-reserve" {
					return cmdline.WithCode(cmdline.ExitError, fmt.Errorf("--remedy %s: the agent's remedies are stale-nat-flow and hostlocal-reserve", r))
				}
			}
			if err := inCheckout(); err != nil {
				return cmdline.WithCode(cmdline.ExitError, err)
			}
			ctx := cmd.Context()
			var err error
			for _, need := range []struct {
				set string
				dir *string
			}{{"kube", &o.KubeBin}, {"cni", &o.CNIBin}, {"crictl", &o.CrictlBin}} {
				if *need.dir, err = b.need(ctx, streams, build.MustLookup(need.set), *need.dir, buildFlag, false); err != nil {
					return err
				}
			}
			o.Release = true
			o.Logf = func(format string, args ...any) { fmt.Fprintf(streams.ErrOut, "cluster: "+format+"\n", args...) }
			c, err := realnode.StartCluster(ctx, o)
			if err != nil {
				return cmdline.WithCode(cmdline.ExitError, err)
			}
			defer func() {
				fmt.Fprintln(streams.ErrOut, "cluster: stopping: every pod through the runtime, the nodes, the control plane")
				c.Stop()
			}()
			kubeconfig, err := c.CP.WriteKubeconfig(controlplane.UserAdmin)
			if err != nil {
				return cmdline.WithCode(cmdline.ExitError, err)
			}
			n := c.Nodes[0]
			values := fmt.Sprintf("image: {tag: %s, pullPolicy: Never}\nagent:\n  hostLocalDataDir: %s\n  cniConfDir: %s\n  remedies: [%s]\n  dryRun: %t\n",
				realnode.LabVersion, filepath.Dir(n.HostLocalDir), n.CNIConfDir(), strings.Join(remedies, ", "), dryRun)
			o.Logf("installing the chart (helm install gw -n ghostwatch)")
			if _, err := realnode.InstallChart(ctx, kubeconfig, "gw", "ghostwatch", values, func(string, ...any) {}); err != nil {
				return cmdline.WithCode(cmdline.ExitError, err)
			}
			fmt.Fprint(streams.Out, clusterGuide(c, kubeconfig, remedies, dryRun))
			<-ctx.Done()
			return nil
		},
	}
	cmd.Flags().IntVar(&o.Nodes, "nodes", 1, "how many real nodes: 1, or 2 linked as two machines (seed 001's and 004's shape)")
	cmd.Flags().StringSliceVar(&remedies, "remedy", nil, "the agent's remedies to turn on: stale-nat-flow, hostlocal-reserve (default none: report only)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "with --remedy: say what the remedies would do, do nothing")
	cmd.Flags().BoolVar(&buildFlag, "build", false, "build the binaries the nodes run when they lack, without asking (as ghostwatch-lab build kube cni crictl does)")
	return cmd
}

// inCheckout returns an error unless the working directory is in a
// checkout of ghostwatch, whose source the images are built from.
func inCheckout() error {
	out, err := exec.Command("go", "list", "-m").Output()
	if err != nil || strings.TrimSpace(string(out)) != modulePath {
		return fmt.Errorf("run it from a checkout of %s: it builds the nodes' images and ghostwatch's release image from the source", modulePath)
	}
	return nil
}

// clusterGuide says where the cluster is and how to play each incident on
// it with kubectl.
func clusterGuide(c *realnode.Cluster, kubeconfig string, remedies []string, dryRun bool) string {
	n := c.Nodes[0]
	mode := "report only"
	if len(remedies) > 0 {
		mode = "remedies " + strings.Join(remedies, ", ")
		if dryRun {
			mode += " (dry run)"
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "A cluster of %d real node(s), ghostwatch installed by its chart (%s).\n\n", len(c.Nodes), mode)
	fmt.Fprintf(&b, "  export KUBECONFIG=%s\n  kubectl get nodes,pods -A -o wide\n\n", kubeconfig)
	for _, x := range c.Nodes {
		fmt.Fprintf(&b, "%s is %s, its network namespace %s: sudo ip netns exec %s curl -s %s:10280/metrics | grep ^ghostwatch_findings\n",
			x.Name, x.IP, x.Net.Name(), x.Net.Name(), x.IP)
	}
	fmt.Fprintf(&b, `
The incidents, with kubectl:

  Pods that answer with their name (the lab's image, no registry):
    kubectl create deployment web --replicas 4 --image %[1]s -- /labpod serve
    kubectl expose deployment web --port 80 --target-port 8080 --type NodePort

  Seed 003, a running pod's IP handed to a second pod: remove host-local's store
  while the pods run, as the report's restart did, and scale up.
    sudo rm -rf %[2]s
    sudo ip netns exec %[4]s curl -s %[5]s:10280/metrics | grep 'ipam-unbooked-ip",severity="critical"'   # 1: before any duplicate
    kubectl scale deployment web --replicas 8
    kubectl get events --field-selector reason=DuplicatePodIP

%[6]s

Ctrl-C removes the cluster. If this process is killed: sudo ghostwatch-lab cleanup --prefix %[3]s
`, realnode.LabpodImage, n.HostLocalDir, realnode.ClusterPrefix, n.Net.Name(), n.IP, seed001Guide(c))
	return b.String()
}

// seed001Guide says how to play seed 001 by hand on two nodes: a pooled
// client on node-1, its backend on node-2, node-2 cut off from node-1 and
// the backend rolled onto node-1, so that the old pod's FIN is lost.
func seed001Guide(c *realnode.Cluster) string {
	if len(c.Nodes) < 2 {
		return `  Seeds 001 and 004, a connection translated to a deleted pod: with --nodes 2 (and
  --remedy stale-nat-flow for the agent to clear it), this guide plays seed 001;
  the tests of lab/realnode play both: sudo -E go test ./lab/realnode -run 'TestSeed00[14]' -v`
	}
	node2 := c.Nodes[1]
	return fmt.Sprintf(`  Seed 001, a pooled connection translated to a deleted pod: a backend on node-2,
  a client pod on node-1 holding one keep-alive connection to it at its ClusterIP.
    kubectl create deployment db --image %[1]s -- /labpod serve
    kubectl patch deployment db -p '{"spec":{"template":{"spec":{"nodeSelector":{"kubernetes.io/hostname":"node-2"}}}}}'
    kubectl expose deployment db --port 80 --target-port 8080
    kubectl run app --image %[1]s --overrides '{"apiVersion":"v1","spec":{"nodeSelector":{"kubernetes.io/hostname":"node-1"}}}' \
      --command -- /labpod client -target "$(kubectl get service db -o jsonpath='{.spec.clusterIP}'):80"
    kubectl logs -f app &      # one line each time what the client sees changes
  A rollout on a healthy node closes the connection (the old pod's FIN): cut node-2
  off node-1 first, then roll the backend onto node-1.
    sudo ip netns exec %[2]s ip link set %[3]s down
    kubectl patch deployment db -p '{"spec":{"template":{"spec":{"nodeSelector":{"kubernetes.io/hostname":"node-1"}}}}}'
  The client's request is retransmitted into the void; with --remedy stale-nat-flow
  the agent deletes the flow after its grace, the client is reset and reconnects.
    kubectl get events --field-selector reason=StaleFlowDeleted
    sudo ip netns exec %[2]s ip link set %[3]s up   # node-2 back`, realnode.LabpodImage, node2.Net.Name(), c.Link.End(node2.Net))
}
