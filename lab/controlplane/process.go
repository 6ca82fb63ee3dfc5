package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// process is one binary the control plane runs, its output in a log file.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
	// retired is true once its stop was asked for while the control plane
	// runs on (StopAPIServer): Check does not report its exit.
	retired bool
}

// startProcess runs argv with its output in dir/name.log and env added to
// the test's environment (a later entry wins over an earlier one of the
// same name). The process dies with the test process (PR_SET_PDEATHSIG), so
// a killed test leaves none behind.
func startProcess(dir, name string, env []string, argv ...string) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended, and how.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after grace.
func (p *process) stop(grace time.Duration) {
	if done, _ := p.exited(); done {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// tail is the end of the process's log, for error messages.
func (p *process) tail() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return strings.Join(lines, "\n")
}

// waitFor polls ready every 50ms until it returns nil, the process exits,
// or the deadline passes; the error then carries ready's last error and the
// end of the process's log.
func (p *process) waitFor(ctx context.Context, deadline time.Duration, what string, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	var last error
	for {
		if done, err := p.exited(); done {
			return fmt.Errorf("%s exited before %s (%v); its log (%s) ends:\n%s", p.name, what, err, p.log, p.tail())
		}
		if last = ready(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not %s after %s: %v; its log (%s) ends:\n%s", p.name, what, deadline, last, p.log, p.tail())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// freePorts reserves n TCP ports on 127.0.0.1 by listening on port 0 and
// releasing them all at once.
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

var errNotReady = errors.New("not ready")

// etcdHealthy is nil when b, etcd's /health answer, says it is healthy.
func etcdHealthy(b []byte) error {
	if bytes.Contains(b, []byte(`"health":"true"`)) {
		return nil
	}
	return fmt.Errorf("%w: %s", errNotReady, bytes.TrimSpace(b))
}

// Process is a program a test runs beside the control plane, such as a
// network plugin's controller: Run starts it, and the control plane's Stop
// stops it with its own processes.
type Process struct{ p *process }

// Run starts argv as a process of the control plane: its output goes to
// Dir/name.log, and env (NAME=value) is added to the test's environment.
func (cp *ControlPlane) Run(name string, env []string, argv ...string) (*Process, error) {
	p, err := startProcess(cp.Dir, name, env, argv...)
	if err != nil {
		return nil, err
	}
	cp.procs = append(cp.procs, p)
	return &Process{p}, nil
}

// PID is the process ID, for reading its /proc entries.
func (p *Process) PID() int { return p.p.cmd.Process.Pid }

// Log is the path of the process's log.
func (p *Process) Log() string { return p.p.log }

// Check reports the process's exit, with the end of its log.
func (p *Process) Check() error {
	if done, err := p.p.exited(); done {
		return fmt.Errorf("%s exited (%v); its log (%s) ends:\n%s", p.p.name, err, p.p.log, p.p.tail())
	}
	return nil
}

// WaitFor polls ready every 50ms until it returns nil, the process exits
// or deadline passes; the error then carries ready's last error and the end
// of the log.
func (p *Process) WaitFor(ctx context.Context, deadline time.Duration, what string, ready func(context.Context) error) error {
	return p.p.waitFor(ctx, deadline, what, ready)
}

// Stop sends SIGTERM, then SIGKILL after grace.
func (p *Process) Stop(grace time.Duration) { p.p.stop(grace) }
