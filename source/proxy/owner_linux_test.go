package proxy

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
)

// serveEnv makes this package's test binary a listener answering /healthz
// at its value: what a Cilium agent answers, and what any process can.
const serveEnv = "GHOSTWATCH_PROXY_TEST_SERVE"

func TestMain(m *testing.M) {
	if addr := os.Getenv(serveEnv); addr != "" {
		os.Exit(serveHealthz(addr))
	}
	os.Exit(m.Run())
}

// serveHealthz answers /healthz at addr, says "listening" on stdout once it
// does, and stops when stdin closes.
func serveHealthz(addr string) int {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	fmt.Println("listening")
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// testNetns is a network namespace of the test's, its loopback up.
type testNetns struct {
	name   string
	handle netns.NsHandle
}

func newTestNetns(t *testing.T) *testNetns {
	t.Helper()
	var rnd [4]byte
	rand.Read(rnd[:])
	n := &testNetns{name: fmt.Sprintf("gwt-px-%x", rnd)}
	err := onThread(func() error {
		h, err := netns.NewNamed(n.name)
		if err != nil {
			return err
		}
		n.handle = h
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	})
	if n.handle.IsOpen() {
		t.Cleanup(func() {
			n.handle.Close()
			if err := netns.DeleteNamed(n.name); err != nil {
				t.Errorf("deleting network namespace %s: %v", n.name, err)
			}
		})
	}
	if err != nil {
		t.Fatalf("network namespace %s: %v", n.name, err)
	}
	return n
}

// onThread runs fn on a locked thread, and puts the thread's network
// namespace back afterwards; a thread that cannot be put back is retired.
func onThread(fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			done <- err
			return
		}
		defer orig.Close()
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			done <- errors.Join(ferr, err)
			return // the thread ends locked, with the goroutine
		}
		runtime.UnlockOSThread()
		done <- ferr
	}()
	return <-done
}

// do runs fn on a thread inside the namespace: sockets it opens, and
// processes it starts, are the namespace's.
func (n *testNetns) do(fn func() error) error {
	return onThread(func() error {
		if err := netns.Set(n.handle); err != nil {
			return err
		}
		return fn()
	})
}

// client dials from inside the namespace.
func (n *testNetns) client() *http.Client {
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := n.do(func() (err error) { c, err = (&net.Dialer{}).DialContext(ctx, network, addr); return err })
		return c, err
	}}}
}

// binaryAs copies the test binary, as name, where any user may run it.
func binaryAs(t *testing.T, name string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "ghostwatch-proxy-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, name)
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// listenAs starts bin as uid, inside n, answering /healthz at addr, and
// returns its pid once it listens.
func (n *testNetns) listenAs(t *testing.T, bin string, uid uint32, addr string) int {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), serveEnv+"="+addr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := n.do(cmd.Start); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "listening\n" {
		t.Fatalf("listener of uid %d: %q, %v; stderr: %s", uid, line, err, stderr.String())
	}
	// Started in the namespace, not beside it.
	want, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", n.handle))
	if got, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid)); got != want {
		t.Fatalf("listener in network namespace %s, want %s", got, want)
	}
	return cmd.Process.Pid
}

// procOf is a procfs as the agent would see it in the namespace: its
// socket tables, and the listener's process.
func procOf(t *testing.T, pid int) string {
	t.Helper()
	dir := t.TempDir()
	for name, target := range map[string]string{"net": fmt.Sprintf("/proc/%d/net", pid), strconv.Itoa(pid): fmt.Sprintf("/proc/%d", pid)} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A process of any user may answer where the Cilium agent answers its
// health checks (127.0.0.1:9879, in the node's network namespace, where
// nothing else holds the port on a node without Cilium): its answer must
// not make the agent take the node for a Cilium kube-proxy replacement and
// leave the flow rules out. The kernel's socket table says who opened the
// listener: a process of uid 65534, even one named cilium-agent, is not
// believed, and the flow rules are judged; root's listener is.
func TestOnlyRootsListenerIsTakenAsCilium(t *testing.T) {
	testenv.RequireRoot(t, "kernel test: creates a network namespace and runs a listener as another user")
	bin := binaryAs(t, "cilium-agent")
	for _, tc := range []struct {
		uid uint32
		// want is what Describe says of a ledger judged, or (with
		// unsupported) what the reason says.
		want        string
		unsupported bool
	}{
		{65534, "cilium-agent (pid PID, uid 65534) answers at 127.0.0.1:9879; not taken as Cilium (not root: any local user may open a listener there): Service NAT assumed in conntrack, and the flow rules judged", false},
		{0, "and a Cilium agent answers at 127.0.0.1:9879 (cilium-agent (pid PID, uid 0)): Cilium's kube-proxy replacement translates Services in eBPF", true},
	} {
		t.Run(fmt.Sprintf("uid %d", tc.uid), func(t *testing.T) {
			n := newTestNetns(t)
			pid := n.listenAs(t, bin, tc.uid, DefaultCilium)
			src := &Source{Proc: procOf(t, pid), Client: n.client()}
			s := &snapshot.Snapshot{}
			err := src.Collect(context.Background(), s)
			want := strings.ReplaceAll(tc.want, "PID", strconv.Itoa(pid))
			if tc.unsupported {
				if !errors.Is(err, source.ErrUnsupported) || !strings.Contains(err.Error(), want) {
					t.Errorf("Collect: %v; want unsupported: %s", err, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("Collect: %v; want the flow rules judged", err)
			}
			if got := src.Describe(s); !strings.Contains(got, want) {
				t.Errorf("Describe:\n got %s\nwant %s", got, want)
			}
		})
	}
}
