package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// memLimitShare is the share of its container's memory limit a long-running
// command gives the Go runtime as its soft limit (runtime/debug.SetMemoryLimit):
// near it, the garbage collector runs harder rather than let the heap grow
// into the limit, where the kernel would kill the process. The rest is for
// what the runtime does not count: the binary's resident pages (about 25
// MiB), and what the heap's fragmentation keeps resident. Measured with a
// million stale flows to one backend under the DaemonSet's 256 MiB
// (BenchmarkOneDeadBackend): at 85 % the agent peaked at 254 MiB.
const memLimitShare = 0.75

// setMemoryLimit gives the Go runtime a soft memory limit of memLimitShare
// of the cgroup's memory limit (cgroup v2 memory.max, or v1
// memory.limit_in_bytes, under root), unless GOMEMLIMIT sets one. It
// returns the limit set, 0 when none was (no limit, or GOMEMLIMIT set).
func setMemoryLimit(root string) (int64, error) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return 0, nil
	}
	limit, err := cgroupMemoryLimit(root)
	if err != nil || limit <= 0 {
		return 0, err
	}
	soft := int64(float64(limit) * memLimitShare)
	debug.SetMemoryLimit(soft)
	return soft, nil
}

// cgroupMemoryLimit reads this process's cgroup memory limit under root
// (/sys/fs/cgroup in a container): 0 when there is none.
func cgroupMemoryLimit(root string) (int64, error) {
	for _, name := range []string{"memory.max", "memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(filepath.Join(root, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		v := strings.TrimSpace(string(b))
		if v == "max" {
			return 0, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q is not a memory limit", filepath.Join(root, name), v)
		}
		// cgroup v1 says "no limit" with a number near 2^63.
		if n >= 1<<62 {
			return 0, nil
		}
		return n, nil
	}
	return 0, nil
}
