package cli

import (
	"os"
	"path/filepath"
	"testing"
)

// The cgroup's memory limit is read as either version writes it; no
// limit, or no cgroup file, is none.
func TestCgroupMemoryLimit(t *testing.T) {
	for _, c := range []struct {
		name, file, content string
		want                int64
		bad                 bool
	}{
		{"v2", "memory.max", "268435456\n", 268435456, false},
		{"v2 unlimited", "memory.max", "max\n", 0, false},
		{"v1", "memory/memory.limit_in_bytes", "268435456\n", 268435456, false},
		{"v1 unlimited", "memory/memory.limit_in_bytes", "9223372036854771712\n", 0, false},
		{"none", "", "", 0, false},
		{"garbage", "memory.max", "lots\n", 0, true},
	} {
		root := t.TempDir()
		if c.file != "" {
			p := filepath.Join(root, c.file)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(c.content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := cgroupMemoryLimit(root)
		if got != c.want || (err != nil) != c.bad {
			t.Errorf("%s: %d, %v; want %d (error %v)", c.name, got, err, c.want, c.bad)
		}
	}
}
