package labcmd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/yaml"

	"github.com/ghostwatch/ghostwatch/internal/cmdline"
	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/lab"
	"github.com/ghostwatch/ghostwatch/lab/build"
	"github.com/ghostwatch/ghostwatch/lab/netbed"
	"github.com/ghostwatch/ghostwatch/lab/realnode"
)

// NewRootCommand builds the ghostwatch-lab command tree writing to streams:
// the incidents it plays, the builds of what they run, and its cleanup.
func NewRootCommand(streams genericiooptions.IOStreams) *cobra.Command {
	return newRootCommand(streams, realBuilder)
}

func newRootCommand(streams genericiooptions.IOStreams, b builder) *cobra.Command {
	root := &cobra.Command{
		Use:   "ghostwatch-lab",
		Short: "Rebuild an incident on the real kernel with network namespaces",
		Long: `ghostwatch-lab rebuilds an incident from ghostwatch's seed reports on this
machine's kernel: a node network namespace running Service DNAT rules
(nftables) with its own conntrack table, pod and client namespaces joined to it
by veth pairs, and an in-memory Kubernetes API that ghostwatch reads through
the same code as a live cluster. It prints a timeline: the client's requests,
what the kernel still maps, and what ghostwatch finds. Each kind of failure the
client meets (a timeout, a reset, a refusal) is printed when it first happens
and whenever the kind changes; the failures that repeat it are counted on one
line.

With -o json or -o yaml, stdout carries what the runs measured, as one object,
and the timeline goes to stderr. With --with-agent, the run with the agent lists
the agent's actions: when (seconds since the start, as on the timeline), the
rule, the flow, and the result (done, refused, failed or gone) with what was
done, why it was refused, or the error.

With --control-plane=real the Kubernetes side is the real thing: etcd,
kube-apiserver and the EndpointSlice controller on 127.0.0.1, and kube-proxy
(iptables mode) in the node namespace programming the DNAT rules. The agent
and the scans then read the cluster with the identity deploy/agent grants.

The real control plane, calico-misbook, hostlocal-wipe and gossip-reuse's
Consul act run binaries built from source (Kubernetes, Calico, the CNI
host-local plugin, Consul): ghostwatch-lab build builds them, once, into the
build cache, $` + testenv.CacheEnv + ` (default ` + testenv.DefaultCache + `),
where the labs find them. A lab that lacks them asks to build them when stdin
is a terminal, builds them without asking with --build, and otherwise stops,
naming the command that builds them; --kube-bin and the like name a directory
instead.

hostlocal-wipe and calico-misbook play IPAM incidents with the real CNI
plugins, and gossip-reuse plays the gossip incident with real memberlist
members and Serf agents on loopback addresses; they need neither root nor a
network namespace: see their help.

The others need root. Each touches nothing outside the namespaces it creates
(all named <prefix>-*) but its lock file, and removes them however it ends: done, Ctrl-C,
SIGTERM, the terminal closing (SIGHUP), or its output closing (piped into head,
it stops once head has read enough, rather than run on unseen).

While it runs it holds /run/ghostwatch/lab-<prefix>.lock (flock(2); the file
holds its pid). It refuses to start while another lab runs with its prefix, and
when namespaces with its prefix are the leftovers of a lab that no longer runs
(one killed with SIGKILL or by the OOM killer): ghostwatch-lab cleanup removes
those.`,
		SilenceUsage:      true,
		SilenceErrors:     true,
		PersistentPreRunE: cmdline.NoNegativeDurations,
	}
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	root.AddCommand(
		newScenarioCommand(streams, b, "conntrack-deploy", lab.ConntrackDeploy,
			"Seed 004: a rolling deploy behind a NodePort leaves a keep-alive client talking to the dead pod",
			`A client outside the cluster keeps one connection to a NodePort. The backend
pod is replaced by a rolling update. While the old pod terminates it is draining
(ghostwatch reports nothing); once it is deleted, the kernel still translates the
client's connection to it, and ghostwatch reports the stale NAT flow.

With --reuse-ip the new pod gets the old pod's IP (a Recreate rollout on a small
pod CIDR): the old connection now reaches a different pod, and ghostwatch reports
the misdelivered flow.

Whether the ghost forms depends on the Service's externalTrafficPolicy, which the
timeline states as the API holds it: with Cluster kube-proxy masquerades NodePort
traffic out of the backend's veth, and the entry goes with the pod. On the real
control plane the Service is Local (the client's address is kept); in the
in-memory API it is not set, and the lab's DNAT rules keep the client's address,
as kube-proxy does for Local.`),
		newScenarioCommand(streams, b, "conntrack-pool", lab.ConntrackPool,
			"Seed 001: a pooled connection stays pinned to a deleted ClusterIP backend",
			`A client pod holds one pooled, long-lived connection to a database behind a
ClusterIP. The database pod is replaced. The pool keeps using its connection, which
the kernel still translates to the deleted pod: every query times out, while new
connections work. ghostwatch reports the stale NAT flow.`),
		newHostLocalWipeCommand(streams, b),
		newCalicoMisbookCommand(streams, b),
		newGossipReuseCommand(streams, b),
		newClusterCommand(streams, b),
		newBuildCommand(streams, b),
		newLabCleanupCommand(streams),
		cmdline.VersionCommand("ghostwatch-lab", streams),
	)
	return root
}

// Main runs the ghostwatch-lab command line and returns the process exit
// code: Ctrl-C, SIGTERM and SIGHUP end a lab through its cleanup.
func Main() int {
	streams := genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	return cmdline.Run(NewRootCommand(streams), streams)
}

func newHostLocalWipeCommand(streams genericiooptions.IOStreams, b builder) *cobra.Command {
	var o lab.HostLocalOptions
	var output string
	var buildFlag bool
	cmd := &cobra.Command{
		Use:   "hostlocal-wipe",
		Short: "Seed 003: host-local's store is wiped while its pods run, and the next pod gets a running pod's IP",
		Long: `Pods start on a node whose CNI allocates with host-local (kindnet's
configuration: 10.244.2.0/24, store /run/cni-ipam-state/kindnet), each through
the real host-local plugin called by libcni as containerd and CRI-O call it.
The store is then wiped while the pods run, as a node restore that cleans CNI
state does. ghostwatch reads the store as its agent does: ipam-unbooked-ip
names every running pod whose IP the store forgot and the address the next
ADD returns.

The incident is then played twice from the same wiped state. Left alone, the
next pod on the node gets a running pod's IP: duplicate-pod-ip. Repaired by
hostlocal-reserve (the agent's remedy: the forgotten reservations written back
under host-local's lock, for the sandboxes the runtime's CNI result cache
names), it gets a fresh address.

The node's files live in a temporary directory, removed at the end; no network
namespace is needed. It needs the host-local plugin, which
ghostwatch-lab build cni builds into the build cache (` + build.MustLookup("cni").About() + `, once;
scripts/cni-plugins.sh in a checkout): on a terminal the lab asks to build it,
--build builds it without asking (--cni-bin, default $GHOSTWATCH_CNI_BIN, else
the build cache).`,
		Example: "  ghostwatch-lab hostlocal-wipe --build\n  ghostwatch-lab hostlocal-wipe --pods 10 -o json\n  ghostwatch-lab hostlocal-wipe --cni-bin \"$(scripts/cni-plugins.sh)\"   # in a checkout",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLab(streams, output, func(timeline io.Writer) (any, error) {
				var err error
				if o.CNIBin, err = b.need(cmd.Context(), streams, build.MustLookup("cni"), o.CNIBin, buildFlag, false); err != nil {
					return nil, err
				}
				o.Out = timeline
				return lab.HostLocalWipe(cmd.Context(), o)
			})
		},
	}
	cmdline.AddOutputFlag(cmd, &output, "text is the timeline; json and yaml print what the runs measured, as one object, and the timeline goes to stderr")
	cmd.Flags().StringVar(&o.CNIBin, "cni-bin", "", "the directory holding the host-local plugin ghostwatch-lab build cni builds (default $GHOSTWATCH_CNI_BIN, else the build cache)")
	cmd.Flags().IntVar(&o.Pods, "pods", 3, "how many pods run on the node when its store is wiped")
	cmd.Flags().BoolVar(&buildFlag, "build", false, buildFlagHelp)
	return cmd
}

func newCalicoMisbookCommand(streams genericiooptions.IOStreams, b builder) *cobra.Command {
	var o lab.CalicoMisbookOptions
	var output string
	var buildFlag bool
	cmd := &cobra.Command{
		Use:   "calico-misbook",
		Short: "Seed 002: Calico books a pod under a stale node name, its leak collector frees the address while the pod runs, and the next pod gets it",
		Long: `Seed 002 (Calico issue #12257) on a real API server with Calico v3.30.1's own
binaries: calico-ipam booking pod addresses, called as a runtime calls it, and
calico-kube-controllers' leak collector freeing them.

node-b and node-d run three pods each. node-a and node-c join, re-imaged from
node-b's and node-d's disks: their /var/lib/calico/nodename still names that
node, and their Calico CNI configuration names none, so calico-ipam books
their first pods under the stale name, in the other node's block. ghostwatch
reports the stale file on each node (stale-nodename-file, on the node's files
as its agent reads them) and the misbooked allocations (ipam-misbooked, on the
cluster as ghostwatch scan reads it), with the window in which the collector
frees each address.

The incident then ends twice from that state, on one cluster. node-c is fixed
as ghostwatch says, before its window opens: its nodename file corrected, its
pod re-created. node-a is left alone: the collector frees its pod's address
while the pod runs (its log: "Pod rescheduled on new node"), ghostwatch
reports ipam-unbooked-ip, and the next pod on node-b gets the address:
duplicate-pod-ip. Nothing of node-c's is freed, and the next pod on node-d
gets an address no running pod holds.

The collector runs with --leak-grace-period: 20s by default, where Calico's
default is 15m (the lab would last half an hour). The lab takes about ten
seconds plus two grace periods: under a minute by default.

It needs etcd, kube-apiserver and kube-controller-manager, which
ghostwatch-lab build kube builds (` + build.MustLookup("kube").About() + `, once; scripts/kube-binaries.sh
in a checkout; --kube-bin, default $GHOSTWATCH_KUBE_BIN, else the build cache),
and calico-kube-controllers, calicoctl and calico-ipam, which ghostwatch-lab
build calico builds (` + build.MustLookup("calico").About() + `, once; scripts/calico-binaries.sh in a
checkout; --calico-bin, default $GHOSTWATCH_CALICO_BIN, else the build cache).
On a terminal the lab asks to build what it lacks; --build builds it without
asking. It needs no root and no network namespace,
and takes no lock: its processes listen on free ports of 127.0.0.1, and the
nodes' files live in a temporary directory. It stops every process it started
and removes that directory however it ends: done, Ctrl-C, SIGTERM, the
terminal closing (SIGHUP), or its output closing.

With -o json or -o yaml, stdout carries what the run measured, as one object
(the pods, ghostwatch's findings and windows, when the collector freed the
address, each ending's next pod and findings; times in seconds since the
start, as on the timeline), and the timeline goes to stderr.`,
		Example: "  ghostwatch-lab calico-misbook --build\n  ghostwatch-lab calico-misbook --leak-grace-period 1m -o json\n  ghostwatch-lab calico-misbook --kube-bin \"$(scripts/kube-binaries.sh)\" --calico-bin \"$(scripts/calico-binaries.sh)\"   # in a checkout",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := cmdline.CheckOutput(output, nil); err != nil {
				return err
			}
			if o.LeakGracePeriod < lab.MinMisbookGrace {
				return cmdline.WithCode(cmdline.ExitError, fmt.Errorf("--leak-grace-period %s: at least %s, so that the fix is played before the collector can free the address", o.LeakGracePeriod, lab.MinMisbookGrace))
			}
			return runLab(streams, output, func(timeline io.Writer) (any, error) {
				var err error
				if o.KubeBin, err = b.need(cmd.Context(), streams, build.MustLookup("kube"), o.KubeBin, buildFlag, false); err != nil {
					return nil, err
				}
				if o.CalicoBin, err = b.need(cmd.Context(), streams, build.MustLookup("calico"), o.CalicoBin, buildFlag, false); err != nil {
					return nil, err
				}
				o.Out = timeline
				return lab.CalicoMisbook(cmd.Context(), o)
			})
		},
	}
	cmdline.AddOutputFlag(cmd, &output, "text is the timeline; json and yaml print what the run measured, as one object, and the timeline goes to stderr")
	f := cmd.Flags()
	f.StringVar(&o.KubeBin, "kube-bin", "", "the directory of the Kubernetes binaries ghostwatch-lab build kube builds (default $GHOSTWATCH_KUBE_BIN, else the build cache)")
	f.StringVar(&o.CalicoBin, "calico-bin", "", "the directory of the Calico binaries ghostwatch-lab build calico builds (default $GHOSTWATCH_CALICO_BIN, else the build cache)")
	f.BoolVar(&buildFlag, "build", false, buildFlagHelp)
	f.DurationVar(&o.LeakGracePeriod, "leak-grace-period", lab.DefaultMisbookGrace, fmt.Sprintf("calico-kube-controllers' leakGracePeriod in the lab (Calico's default is 15m); at least %s, and the lab lasts about two of them", lab.MinMisbookGrace))
	return cmd
}

func newGossipReuseCommand(streams genericiooptions.IOStreams, b builder) *cobra.Command {
	var o lab.GossipReuseOptions
	var output string
	var buildFlag bool
	cmd := &cobra.Command{
		Use:   "gossip-reuse",
		Short: "Seed 000: a gossip member outlives its pod, Kubernetes gives its address to the next pod, and ghostwatch finds the ghost",
		Long: `Seed 000 with real memberlist members (github.com/hashicorp/memberlist) and
real Serf agents (github.com/hashicorp/serf), each on its own address of
127.0.0.0/8. There is no Kubernetes: the pods are stated as the API server
would list them (namespace, name, UID, IP, start time), and ghostwatch's
gossip rules (gossip-ghost-member, gossip-ip-identity) judge every live
member's list against them: memberlist's as the ghostwatch/gossip package's
View serves it over HTTP, Serf's through its agent's RPC.

In each act a cluster of three runs; one member's pod goes, and the next pod
gets its address and port:

  1a  memberlist, members named after their IPs (the seed's application): the
      new pod's member takes the dead one's name; only gossip-ip-identity warns.
  1b  the same, the new pod's member with a name of its own: the dead member
      stays listed at the address beside it; gossip-ghost-member names both.
  2   Serf: the crashed member stays failed beside the new one (for
      ReconnectTimeout, 24h by default) until force-leave -prune, sent through
      the survivor's RPC as ghostwatch does; then nothing is found.
  2b  Consul (the seed's own system, with ACLs on), played when the consul
      binary is built (ghostwatch-lab build consul, or --build; on a
      terminal the lab asks; --consul-bin): a client named after its IP
      crashes, stays failed beside the new pod's agent, and goes with
      force-leave -prune sent with the cluster's token.
  3   the ghostwatch/gossip package: names from the pod UID, a leave on
      SIGTERM (gossip.LeaveOnDone): the old member is left, never suspected.
  4a  a pod of another namespace gets a crashed member's address, and a
      surviving member reconnects to it (as Alertmanager does): without a
      memberlist Label the two clusters merge.
  4b  the same with the package's Label: the foreign pod refuses the cluster's
      traffic ("unacceptable label"), and nothing is left once the dead member
      is forgotten.

Timings are shortened so that the lab takes about 20 seconds (memberlist's
ProbeInterval 200ms, GossipToTheDeadTime 3s, ...): each act prints the values
it changed beside the defaults, and what the defaults give. It needs no root
and no lock: its members listen on free ports of 127.0.0.111 to 127.0.0.146
(Linux routes all of 127.0.0.0/8 to lo; macOS does not). It stops every member
it started however it ends: done, Ctrl-C, SIGTERM, SIGHUP, or its output
closing.

With -o json or -o yaml, stdout carries what the acts measured, as one object
(each act's settings, the states the old member went through, durations,
log lines counted, and every scan: the lists read and the findings), and the
timeline goes to stderr.`,
		Example: "  ghostwatch-lab gossip-reuse\n  ghostwatch-lab gossip-reuse -o json | jq '.acts[] | {id, measured_seconds}'",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLab(streams, output, func(timeline io.Writer) (any, error) {
				var err error
				if o.ConsulBin, err = b.need(cmd.Context(), streams, build.MustLookup("consul"), o.ConsulBin, buildFlag, true); err != nil {
					return nil, err
				}
				o.Out = timeline
				return lab.GossipReuse(cmd.Context(), o)
			})
		},
	}
	cmdline.AddOutputFlag(cmd, &output, "text is the timeline; json and yaml print what the acts measured, as one object, and the timeline goes to stderr")
	cmd.Flags().StringVar(&o.ConsulBin, "consul-bin", "", "the directory holding the consul binary ghostwatch-lab build consul builds, for act 2b (default $GHOSTWATCH_CONSUL_BIN, else the build cache, /var/cache/ghostwatch; without one the act is not played)")
	cmd.Flags().BoolVar(&buildFlag, "build", false, "build the consul binary for act 2b first when it lacks, without asking (as ghostwatch-lab build consul does; into $"+testenv.CacheEnv+", default "+testenv.DefaultCache+")")
	return cmd
}

func newLabCleanupCommand(streams genericiooptions.IOStreams) *cobra.Command {
	var prefix string
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Remove the namespaces a lab that no longer runs left behind",
		Long: `cleanup removes the network namespaces named <prefix>-* that a lab which is
no longer running left behind (killed with SIGKILL or by the OOM killer),
and with them their links, rules and conntrack entries. A real node's
namespace goes with what its node left: its containerd, shims, kubelet and
pods' processes, its mounts, its pods' namespaces and its cgroups. It prints
each one it removes; with none to remove it says so and exits 0.

It refuses while a lab runs with the prefix (it holds
/run/ghostwatch/lab-<prefix>.lock), and leaves alone the namespaces of a running
lab whose longer prefix starts with this one. It needs root.`,
		Example: "  sudo ghostwatch-lab cleanup\n  sudo ghostwatch-lab cleanup --prefix gw-h1",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			removed, err := netbed.Cleanup(prefix, realnode.Reap)
			for _, n := range removed {
				fmt.Fprintf(streams.Out, "removed network namespace %s\n", n)
			}
			if err != nil {
				return cmdline.WithCode(cmdline.ExitError, err)
			}
			if len(removed) == 0 {
				fmt.Fprintf(streams.Out, "nothing to do: no network namespace named %s-* is left\n", prefix)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&prefix, "prefix", "gw-lab", "name prefix of the lab whose namespaces to remove")
	return cmd
}

type scenarioFunc func(context.Context, lab.Options) (*lab.Result, error)

func newScenarioCommand(streams genericiooptions.IOStreams, b builder, name string, run scenarioFunc, short, long string) *cobra.Command {
	var o lab.Options
	var output string
	var buildFlag bool
	cmd := &cobra.Command{
		Use:     name,
		Short:   short,
		Long:    long,
		Example: fmt.Sprintf("  sudo ghostwatch-lab %s\n  sudo ghostwatch-lab %s --reuse-ip -o json\n  sudo ghostwatch-lab %s --with-agent --control-plane=real --build", name, name, name),
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLab(streams, output, func(timeline io.Writer) (any, error) {
				if o.ControlPlane == lab.ControlPlaneReal {
					var err error
					if o.KubeBin, err = b.need(cmd.Context(), streams, build.MustLookup("kube"), o.KubeBin, buildFlag, false); err != nil {
						return nil, err
					}
				}
				o.Out = timeline
				return run(cmd.Context(), o)
			})
		},
	}
	f := cmd.Flags()
	cmdline.AddOutputFlag(cmd, &output, "text is the timeline; json and yaml print what the runs measured, as one object, and the timeline goes to stderr")
	f.BoolVar(&o.ReuseIP, "reuse-ip", false, "give the new pod the old pod's IP")
	f.StringVar(&o.Prefix, "prefix", "gw-lab", "name prefix of the network namespaces the lab creates")
	f.DurationVar(&o.Observe, "observe", 15*time.Second, "how long to watch the client after its backend died")
	f.DurationVar(&o.Steady, "steady", 3*time.Second, "how long the client runs before the rollout")
	f.BoolVar(&o.WithAgent, "with-agent", false, "play the incident twice, without and with the agent removing stale flows, and compare the error windows (-o json lists the agent's actions)")
	f.DurationVar(&o.Grace, "grace", 200*time.Millisecond, "the agent's grace period in the lab (with --with-agent)")
	f.StringVar(&o.ControlPlane, "control-plane", lab.ControlPlaneMemory, "memory (an in-memory API; the lab programs the DNAT rules) or real (kube-apiserver, the EndpointSlice controller and kube-proxy)")
	f.StringVar(&o.KubeBin, "kube-bin", "", "with --control-plane=real: the directory of the binaries ghostwatch-lab build kube builds (default $GHOSTWATCH_KUBE_BIN, else the build cache)")
	f.BoolVar(&buildFlag, "build", false, "with --control-plane=real: "+buildFlagHelp)
	return cmd
}

// runLab runs a lab: its timeline goes to stdout, or to stderr when
// --output prints what it measured on stdout as one json or yaml object.
// A closed stdout stops the lab through its cleanup (notifySIGPIPE).
func runLab(streams genericiooptions.IOStreams, output string, run func(timeline io.Writer) (any, error)) error {
	format, err := cmdline.CheckOutput(output, nil)
	if err != nil {
		return err
	}
	defer notifySIGPIPE()()
	timeline := streams.Out
	if format != "text" {
		timeline = streams.ErrOut // stdout carries one object
	}
	res, err := run(timeline)
	if err != nil {
		return cmdline.WithCode(cmdline.ExitError, err)
	}
	if err := writeResult(streams.Out, format, res); err != nil {
		return cmdline.WithCode(cmdline.ExitError, fmt.Errorf("writing the result: %w", err))
	}
	return nil
}

// notifySIGPIPE makes a write to a closed stdout (ghostwatch-lab ... |
// head) fail with EPIPE instead of killing the process, so that the
// timeline stops the lab through its cleanup; it returns what undoes it.
// The signal itself is dropped, since the lab's own sockets raise it too
// when a peer resets them.
func notifySIGPIPE() (stop func()) {
	sigpipe := make(chan os.Signal, 1)
	signal.Notify(sigpipe, syscall.SIGPIPE)
	return func() { signal.Stop(sigpipe) }
}

// writeResult prints what the scenario measured in format: json and yaml
// the same object; text nothing more, the timeline said it all.
func writeResult(w io.Writer, format string, res any) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(res)
	case "yaml":
		b, err := yaml.Marshal(res)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	return nil
}
