package cni

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/ghostwatch/ghostwatch/internal/testenv"
)

// BinEnv names the directory holding the CNI plugins; scripts/cni-plugins.sh
// prints it.
const BinEnv = "GHOSTWATCH_CNI_BIN"

// HostLocalBinary is the host-local IPAM plugin's executable in BinEnv.
const HostLocalBinary = "host-local"

// Script builds HostLocalBinary and prints the directory it is in.
const Script = "scripts/cni-plugins.sh"

// ErrNoBinary is returned by FindHostLocal when the plugin is not built.
var ErrNoBinary = errors.New("the CNI host-local plugin is not built: run " + Script + " and set " + BinEnv + " to the directory it prints")

// FindHostLocal returns the path of host-local in the directory named by
// $GHOSTWATCH_CNI_BIN, or ErrNoBinary when it is unset. A directory that
// lacks the executable is an error naming it.
func FindHostLocal() (string, error) {
	dir, err := testenv.BinDir(BinEnv, Script, ErrNoBinary, HostLocalBinary)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, HostLocalBinary), nil
}

// The commands a runtime gives a plugin in CNI_COMMAND.
const (
	CmdAdd   = "ADD"
	CmdDel   = "DEL"
	CmdCheck = "CHECK"
)

// Plugin runs one CNI plugin executable as a container runtime does: the
// command and the container in CNI_* variables, the network configuration
// on stdin, the result or the error as JSON on stdout and the exit status
// saying which. The plugin inherits this process's environment without its
// CNI_* variables.
type Plugin struct {
	// Bin is the executable. CNI_PATH is its directory, where a plugin
	// looks for the plugins it delegates to.
	Bin string
	// Config is the network configuration every call writes to stdin. A
	// runtime would add prevResult for CHECK; host-local does not read it.
	Config []byte
}

// Container is what a call is about.
type Container struct {
	ID string // CNI_CONTAINERID
	// Netns is CNI_NETNS, a path. host-local never enters it; after ADD and
	// DEL the plugin library only refuses the plugin's own namespace, and a
	// path that cannot be opened passes.
	Netns  string
	IfName string // CNI_IFNAME
	Args   []Arg  // CNI_ARGS, in this order
}

// Arg is one KEY=VALUE pair of CNI_ARGS.
type Arg struct{ Key, Value string }

// PodArgs are the CNI_ARGS a Kubernetes runtime passes for a pod's sandbox.
// IgnoreUnknown=1 comes first: without it host-local refuses the K8S_POD_*
// keys it does not know.
func PodArgs(namespace, name string) []Arg {
	return []Arg{
		{"IgnoreUnknown", "1"},
		{"K8S_POD_NAMESPACE", namespace},
		{"K8S_POD_NAME", name},
	}
}

// Result is the part of a plugin's result the lab reads.
type Result struct {
	CNIVersion string `json:"cniVersion"`
	IPs        []IP   `json:"ips"`
}

// IP is one address of a Result.
type IP struct {
	Address netip.Prefix `json:"address"` // the address with its subnet's length
	Gateway netip.Addr   `json:"gateway"` // zero when the plugin gave none
}

// Error is a plugin's failure as the CNI specification reports it: a
// non-zero exit with {"code", "msg", "details"} on stdout.
type Error struct {
	Plugin      string // the executable's base name
	Command     string
	ContainerID string
	Code        uint
	Msg         string
	Details     string
	// Result is what the plugin printed before its error, nil if nothing:
	// host-local prints its result, then fails when CNI_NETNS is its own
	// namespace, and keeps the address it printed.
	Result *Result
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s %s of container %s: CNI error %d: %s", e.Plugin, e.Command, e.ContainerID, e.Code, e.Msg)
	if e.Details != "" {
		s += " (" + e.Details + ")"
	}
	return s
}

// Add runs ADD and returns the plugin's result.
func (p Plugin) Add(ctx context.Context, c Container) (*Result, error) {
	out, err := p.run(ctx, CmdAdd, c)
	if err != nil {
		return nil, err
	}
	var r Result
	if err := json.Unmarshal(out, &r); err != nil {
		return nil, fmt.Errorf("%s %s of container %s: result %q: %w", filepath.Base(p.Bin), CmdAdd, c.ID, out, err)
	}
	return &r, nil
}

// Del runs DEL.
func (p Plugin) Del(ctx context.Context, c Container) error {
	_, err := p.run(ctx, CmdDel, c)
	return err
}

// Check runs CHECK.
func (p Plugin) Check(ctx context.Context, c Container) error {
	_, err := p.run(ctx, CmdCheck, c)
	return err
}

// run runs the plugin once and returns its stdout when it succeeded; its
// failure as an *Error when it printed one.
func (p Plugin) run(ctx context.Context, command string, c Container) ([]byte, error) {
	name := filepath.Base(p.Bin)
	where := fmt.Sprintf("%s %s of container %s", name, command, c.ID)
	args, err := cniArgs(c.Args)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	env := make([]string, 0, len(os.Environ())+6)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CNI_") {
			env = append(env, kv)
		}
	}
	for _, kv := range [][2]string{
		{"CNI_COMMAND", command},
		{"CNI_CONTAINERID", c.ID},
		{"CNI_NETNS", c.Netns},
		{"CNI_IFNAME", c.IfName},
		{"CNI_ARGS", args},
		{"CNI_PATH", filepath.Dir(p.Bin)},
	} {
		if kv[1] != "" {
			env = append(env, kv[0]+"="+kv[1])
		}
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, p.Bin)
	cmd.Env = env
	cmd.Stdin = bytes.NewReader(p.Config)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	if runErr == nil {
		return stdout.Bytes(), nil
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%s: %w (%v)", where, ctx.Err(), runErr)
	}
	var exit *exec.ExitError
	if !errors.As(runErr, &exit) {
		return nil, fmt.Errorf("%s: %w", where, runErr)
	}
	if e := parseError(stdout.Bytes()); e != nil {
		e.Plugin, e.Command, e.ContainerID = name, command, c.ID
		return nil, e
	}
	return nil, fmt.Errorf("%s: %w without a CNI error: stdout %q, stderr %q", where, runErr, stdout.Bytes(), stderr.Bytes())
}

// parseError reads a failed plugin's stdout: a CNI error, maybe after the
// result it printed before failing. It returns nil when stdout is anything
// else.
func parseError(out []byte) *Error {
	var docs []json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var doc json.RawMessage
		if err := dec.Decode(&doc); err == io.EOF {
			break
		} else if err != nil {
			return nil
		}
		docs = append(docs, doc)
	}
	if len(docs) == 0 || len(docs) > 2 {
		return nil
	}
	var e struct {
		Code    *uint  `json:"code"`
		Msg     string `json:"msg"`
		Details string `json:"details"`
	}
	if err := json.Unmarshal(docs[len(docs)-1], &e); err != nil || e.Code == nil {
		return nil
	}
	perr := &Error{Code: *e.Code, Msg: e.Msg, Details: e.Details}
	if len(docs) == 2 {
		var r Result
		if err := json.Unmarshal(docs[0], &r); err != nil {
			return nil
		}
		perr.Result = &r
	}
	return perr
}

// cniArgs joins args as CNI_ARGS: KEY=VALUE pairs separated by ';'.
func cniArgs(args []Arg) (string, error) {
	pairs := make([]string, 0, len(args))
	for _, a := range args {
		if a.Key == "" || strings.ContainsAny(a.Key, "=;") || strings.ContainsAny(a.Value, "=;") {
			return "", fmt.Errorf("CNI_ARGS pair %q=%q: keys are not empty, and neither keys nor values hold '=' or ';'", a.Key, a.Value)
		}
		pairs = append(pairs, a.Key+"="+a.Value)
	}
	return strings.Join(pairs, ";"), nil
}
