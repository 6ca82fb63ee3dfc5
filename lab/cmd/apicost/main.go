// Command apicost measures what ghostwatch's agent costs the API server
// beside kube-proxy on the same node of a real control plane (lab/apicost):
// requests, objects and bytes received while both start and while pods are
// replaced, and their resident memory. scripts/bench-apicost.sh builds and
// runs it; it needs root.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/ghostwatch/ghostwatch/lab/apicost"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
)

func main() {
	def := apicost.DefaultSizes()
	cfg := apicost.Config{}
	flag.IntVar(&cfg.Pods, "pods", def.Pods, "pods, spread evenly over the Nodes and the Services")
	flag.IntVar(&cfg.Nodes, "nodes", def.Nodes, "Node objects; the first runs kube-proxy and the agent")
	flag.IntVar(&cfg.Services, "services", def.Services, "ClusterIP Services, each selecting an equal share of the pods")
	flag.IntVar(&cfg.Replacements, "replacements", def.Replacements, "pods replaced (deleted with a grace period of 1s, a new one created) during the churn")
	flag.Float64Var(&cfg.Rate, "rate", def.Rate, "replacements begun per second")
	flag.DurationVar(&cfg.Quiet, "quiet", apicost.DefaultQuiet, "how long both clients must be idle for a phase to end")
	flag.IntVar(&cfg.Workers, "workers", 32, "parallel writers building the cluster")
	flag.StringVar(&cfg.AgentBin, "agent-bin", os.Getenv(apicost.AgentBinEnv), "the ghostwatch binary to measure (default $"+apicost.AgentBinEnv+")")
	flag.StringVar(&cfg.KubeBin, "kube-bin", os.Getenv(controlplane.BinEnv), "the Kubernetes binaries' directory, as "+controlplane.Script+" prints it (default $"+controlplane.BinEnv+")")
	flag.StringVar(&cfg.Dir, "dir", "", "keep the control plane's files (logs, audit log) in this directory (default: a temporary one, removed)")
	output := flag.String("o", "text", "output: text (a table, then key=value lines) or json")
	flag.Parse()
	if *output != "text" && *output != "json" {
		fmt.Fprintf(os.Stderr, "apicost: -o %q: want text or json\n", *output)
		os.Exit(2)
	}
	if cfg.AgentBin == "" {
		fmt.Fprintln(os.Stderr, "apicost: no agent binary: pass --agent-bin or set "+apicost.AgentBinEnv+" (go build -o /tmp/ghostwatch ./cmd/ghostwatch)")
		os.Exit(2)
	}
	if cfg.KubeBin == "" {
		fmt.Fprintln(os.Stderr, "apicost: "+controlplane.ErrNoBinaries.Error())
		os.Exit(2)
	}
	cfg.Progress = os.Stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := apicost.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicost:", err)
		stop()
		os.Exit(1)
	}
	if *output == "json" {
		err = res.WriteJSON(os.Stdout)
	} else {
		err = res.WriteText(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicost:", err)
		os.Exit(1)
	}
}
