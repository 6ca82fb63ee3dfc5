package labcmd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/ghostwatch/ghostwatch/internal/cmdline"
	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/lab/build"
)

// builder is how the commands build what a lab lacks: whether they may
// ask (stdin is a terminal), and the build itself. The tests replace both.
type builder struct {
	interactive func(in io.Reader) bool
	build       func(ctx context.Context, s build.Set, progress io.Writer) (string, error)
}

// realBuilder asks when stdin is a terminal and builds with the recipes
// the binary carries.
var realBuilder = builder{
	interactive: func(in io.Reader) bool {
		f, ok := in.(*os.File)
		return ok && term.IsTerminal(int(f.Fd()))
	},
	build: func(ctx context.Context, s build.Set, progress io.Writer) (string, error) {
		return build.Build(ctx, s, build.Options{Progress: progress})
	},
}

// buildFlagHelp is the help of every lab's --build.
const buildFlagHelp = "build the binaries the lab needs and lacks before it starts, without asking (as ghostwatch-lab build does; into $" + testenv.CacheEnv + ", default " + testenv.DefaultCache + ")"

// need makes sure the set is there for a lab, and returns the directory
// to run it from. A directory dir (the set's flag) or the set's variable
// names must hold every binary, or the error names it (the lab of an
// optional set checks those itself). Otherwise the cache may hold the set;
// if not, it is built with --build (buildFlag), and without, on a
// terminal, after asking; else the answer is the set's NotBuilt error, or
// "" when the lab plays without the set (optional).
func (b builder) need(ctx context.Context, streams genericiooptions.IOStreams, s build.Set, dir string, buildFlag, optional bool) (string, error) {
	if dir != "" {
		if optional {
			return dir, nil
		}
		return dir, testenv.HasExecutables(s.Flag+" "+dir, dir, s.Command(), s.Binaries...)
	}
	if env := os.Getenv(s.Env); env != "" {
		if optional {
			return "", nil
		}
		return env, testenv.HasExecutables(s.Env+"="+env, env, s.Command(), s.Binaries...)
	}
	// The variable is unset: BinDir looks in the cache, for the
	// directories named after the script.
	found, err := testenv.BinDir(s.Env, s.Script, build.ErrNotBuilt, s.Binaries...)
	if err == nil {
		return found, nil
	}
	if !errors.Is(err, build.ErrNotBuilt) {
		return "", err
	}
	cache := build.CacheRoot()
	if !buildFlag {
		if !b.interactive(streams.In) {
			if optional {
				return "", nil
			}
			return "", s.NotBuilt()
		}
		if err := build.Check(s, cache); err != nil {
			if optional {
				return "", nil
			}
			return "", fmt.Errorf("%w; and cannot be built here: %w", s.NotBuilt(), err)
		}
		fmt.Fprint(streams.ErrOut, s.Question(cache))
		if !yes(streams.In) {
			if optional {
				return "", nil
			}
			return "", s.NotBuilt()
		}
	}
	fmt.Fprintln(streams.ErrOut, s.Plan(cache))
	got, err := b.build(ctx, s, streams.ErrOut)
	if err != nil {
		return "", cmdline.WithCode(cmdline.ExitError, err)
	}
	return got, nil
}

// yes reads one answer line from in: y or yes, in any case.
func yes(in io.Reader) bool {
	line, _ := bufio.NewReader(in).ReadString('\n')
	a := strings.ToLower(strings.TrimSpace(line))
	return a == "y" || a == "yes"
}

func newBuildCommand(streams genericiooptions.IOStreams, b builder) *cobra.Command {
	var lines []string
	for _, s := range build.Sets {
		lines = append(lines, fmt.Sprintf("  %-7s %s\n          %s %s", s.Name, strings.Join(s.Binaries, ", "), s.About(), s.Cost))
	}
	cmd := &cobra.Command{
		Use:   "build {" + strings.Join(build.Names(), "|") + "}...",
		Short: "Build the binaries the labs run (Kubernetes, Calico, the CNI plugins, crictl, Prometheus, Consul) into the build cache",
		Long: `build builds, from source, the binaries some labs run but the lab does not
link, into the build cache: $` + testenv.CacheEnv + `, default ` + testenv.DefaultCache + `,
a directory per version set, where the labs find them without a flag.

` + "  NAME    BINARIES\n          COLD BUILD" + `

` + strings.Join(lines, "\n") + `
  all     every one of them, in that order

It needs ` + build.Needs + `
(GOPROXY; the versions are pinned, and their go.sum checked). It runs the
recipe the repository builds with (scripts/<name>.sh and tools/<name>/, whose
copies this binary carries), so a checkout is not needed; in one, the script
builds the same into the same directory. A set already in the cache is not
built again. Each line the build says goes to stderr, with the time since it
started; the directory of each set goes to stdout.

calico-misbook needs kube and calico, hostlocal-wipe cni, the conntrack labs
with --control-plane=real kube, and gossip-reuse plays its Consul act with
consul. A lab that lacks a set asks to build it when stdin is a terminal,
builds it without asking with --build, and otherwise stops, naming this
command.`,
		Example:   "  sudo ghostwatch-lab build kube\n  GHOSTWATCH_KUBE_CACHE=~/.cache/ghostwatch ghostwatch-lab build all",
		ValidArgs: build.Names(),
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("name what to build: %s", strings.Join(build.Names(), ", "))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var sets []build.Set
			for _, a := range args {
				named, err := build.Lookup(a)
				if err != nil {
					return cmdline.WithCode(cmdline.ExitError, err)
				}
				for _, s := range named {
					if !slices.ContainsFunc(sets, func(t build.Set) bool { return t.Name == s.Name }) {
						sets = append(sets, s)
					}
				}
			}
			cache := build.CacheRoot()
			for _, s := range sets {
				if err := build.Check(s, cache); err != nil {
					return cmdline.WithCode(cmdline.ExitError, err)
				}
			}
			for _, s := range sets {
				fmt.Fprintln(streams.ErrOut, s.Plan(cache))
				dir, err := b.build(cmd.Context(), s, streams.ErrOut)
				if err != nil {
					return cmdline.WithCode(cmdline.ExitError, err)
				}
				fmt.Fprintln(streams.Out, dir)
			}
			return nil
		},
	}
	return cmd
}
