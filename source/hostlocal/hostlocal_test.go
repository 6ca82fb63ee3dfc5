package hostlocal

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/nodefs"
)

// node writes files under a fresh host root: path (relative to /) to
// content.
func node(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, p)
		dir := filepath.Dir(full)
		if strings.HasSuffix(p, "/") {
			dir = full
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(p, "/") {
			continue
		}
		if err := os.WriteFile(full, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func collect(t *testing.T, root string) (*snapshot.HostLocal, error) {
	t.Helper()
	s := &snapshot.Snapshot{}
	err := (&Source{Root: root}).Collect(context.Background(), s)
	if err != nil && s.HostLocal != nil {
		t.Errorf("Collect failed (%v) but set the ledger", err)
	}
	return s.HostLocal, err
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// kind's node: kindnet's conflist gives host-local a data directory of its
// own; a second, dual-stack network in the old single-range form uses the
// default one; a third directory has no configuration.
func TestCollect(t *testing.T) {
	root := node(t, map[string]string{
		"etc/cni/net.d/10-kindnet.conflist": `{"cniVersion":"0.3.1","name":"kindnet","plugins":[
			{"type":"ptp","ipMasq":false,"ipam":{"type":"host-local","dataDir":"/run/cni-ipam-state",
			 "routes":[{"dst":"0.0.0.0/0"}],"ranges":[[{"subnet":"10.244.2.0/24"}]]},"mtu":1500},
			{"type":"portmap","capabilities":{"portMappings":true}}]}`,
		"etc/cni/net.d/20-dual.conf": `{"cniVersion":"1.0.0","name":"dual","type":"bridge","ipam":{"type":"host-local",
			"subnet":"10.10.0.0/16","rangeStart":"10.10.1.10","rangeEnd":"10.10.1.20","gateway":"10.10.0.1",
			"ranges":[[{"subnet":"fd00:10::/64"}]]}}`,
		"etc/cni/net.d/30-calico.conflist":              `{"name":"k8s-pod-network","plugins":[{"type":"calico","ipam":{"type":"calico-ipam"}}]}`,
		"etc/cni/net.d/README":                          "not a configuration",
		"run/cni-ipam-state/kindnet/10.244.2.2":         "fc3a04aa\r\neth0",
		"run/cni-ipam-state/kindnet/10.244.2.10":        "97062860",
		"run/cni-ipam-state/kindnet/10.244.2.3":         "0b1c2d3e\r\neth0",
		"run/cni-ipam-state/kindnet/last_reserved_ip.0": "10.244.2.10",
		"run/cni-ipam-state/kindnet/lock":               "",
		"run/cni-ipam-state/kindnet/10.244.2.2.bak":     "x",
		"var/lib/cni/networks/dual/10.10.1.10":          "aaaa\r\neth0",
		"var/lib/cni/networks/dual/fd00:10::2":          "aaaa\r\neth0",
		"var/lib/cni/networks/dual/last_reserved_ip.1":  "fd00:10::2\n",
		"var/lib/cni/networks/old/10.88.0.5":            "cafe",
		"var/lib/cni/networks/old/last_reserved_ip.0":   "10.88.0.5",
		"var/lib/cni/networks/notes.txt":                "a file beside the networks",
		"var/lib/cni/results/kindnet-fc3a04aa-eth0": `{"kind":"cniCacheV1","containerId":"fc3a04aa","config":"e30=","ifName":"eth0","networkName":"kindnet",
			"cniArgs":[["IgnoreUnknown","1"],["K8S_POD_NAMESPACE","default"],["K8S_POD_NAME","web-0"],["K8S_POD_UID","u-0"]],
			"result":{"cniVersion":"1.0.0","ips":[{"address":"10.244.2.2/24","gateway":"10.244.2.1"}]}}`,
		"var/lib/cni/results/half-written": `{"kind":"cniCacheV1","contai`,
	})
	h, err := collect(t, root)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]snapshot.HostLocalNetwork{}
	for _, n := range h.Networks {
		byName[n.Name] = n
	}
	if len(byName) != 3 {
		t.Fatalf("networks %+v, want kindnet, dual and old", h.Networks)
	}
	kn := byName["kindnet"]
	if kn.Dir != "/run/cni-ipam-state/kindnet" || kn.Config != "/etc/cni/net.d/10-kindnet.conflist" || kn.Missing {
		t.Errorf("kindnet: %+v", kn)
	}
	var got []string
	for _, r := range kn.Reservations {
		got = append(got, r.IP.String()+"="+r.ContainerID+"/"+r.IfName)
		if r.Modified.IsZero() {
			t.Errorf("%s: no modification time", r.IP)
		}
	}
	if want := []string{"10.244.2.2=fc3a04aa/eth0", "10.244.2.3=0b1c2d3e/eth0", "10.244.2.10=97062860/"}; !reflect.DeepEqual(got, want) {
		t.Errorf("kindnet reservations %v, want %v (address order, both formats)", got, want)
	}
	if kn.LastReserved[0] != addr("10.244.2.10") || kn.Ignored != 1 || kn.IgnoredExample != "10.244.2.2.bak" {
		t.Errorf("kindnet: last %v, ignored %d (%s)", kn.LastReserved, kn.Ignored, kn.IgnoredExample)
	}
	wantKind := []snapshot.RangeSet{{{Subnet: netip.MustParsePrefix("10.244.2.0/24"), Start: addr("10.244.2.1"), End: addr("10.244.2.254"), Gateway: addr("10.244.2.1")}}}
	if !reflect.DeepEqual(kn.RangeSets, wantKind) {
		t.Errorf("kindnet ranges %+v, want %+v", kn.RangeSets, wantKind)
	}

	dual := byName["dual"]
	wantDual := []snapshot.RangeSet{
		{{Subnet: netip.MustParsePrefix("10.10.0.0/16"), Start: addr("10.10.1.10"), End: addr("10.10.1.20"), Gateway: addr("10.10.0.1")}},
		{{Subnet: netip.MustParsePrefix("fd00:10::/64"), Start: addr("fd00:10::1"), End: addr("fd00:10::ffff:ffff:ffff:ffff"), Gateway: addr("fd00:10::1")}},
	}
	if dual.Dir != "/var/lib/cni/networks/dual" || !reflect.DeepEqual(dual.RangeSets, wantDual) || dual.LastReserved[1] != addr("fd00:10::2") || len(dual.Reservations) != 2 {
		t.Errorf("dual: %+v\nwant ranges %+v", dual, wantDual)
	}
	old := byName["old"]
	if old.RangeSets != nil || old.Config != "" || len(old.Reservations) != 1 || old.Reservations[0].ContainerID != "cafe" || old.Unjudged == "" {
		t.Errorf("old: %+v", old)
	}
	wantCache := []snapshot.CachedResult{{File: "/var/lib/cni/results/kindnet-fc3a04aa-eth0", Network: "kindnet", ContainerID: "fc3a04aa", IfName: "eth0",
		PodNamespace: "default", PodName: "web-0", PodUID: "u-0", IPs: []netip.Addr{addr("10.244.2.2")}}}
	if !reflect.DeepEqual(h.Cached, wantCache) || h.CacheSkipped != 1 {
		t.Errorf("cache %+v (skipped %d), want %+v and the half-written file skipped", h.Cached, h.CacheSkipped, wantCache)
	}
	if d := (&Source{}).Describe(&snapshot.Snapshot{HostLocal: h}); !strings.Contains(d, "kindnet 3 reserved, 1 other files ignored (10.244.2.2.bak)") || !strings.Contains(d, "old 1 reserved, not judged: no CNI configuration names it, and the node's network (kindnet, plugin ptp) does not hand out its addresses: a leftover store") {
		t.Errorf("Describe = %q", d)
	}
}

// A network a configuration names but whose directory does not exist yet
// (no pod ever started, or only its directory was removed) holds nothing.
func TestCollectNetworkWithoutDirectory(t *testing.T) {
	root := node(t, map[string]string{
		"etc/cni/net.d/10-net.conf": `{"name":"net","type":"bridge","ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/24"}]]}}`,
		"var/lib/cni/networks/":     "",
	})
	h, err := collect(t, root)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Networks) != 1 || !h.Networks[0].Missing || h.Networks[0].Dir != "/var/lib/cni/networks/net" || len(h.Networks[0].RangeSets) != 1 {
		t.Errorf("networks %+v", h.Networks)
	}
}

// Seed 003: the whole data directory was removed (rm -rf
// /run/cni-ipam-state) while its parent is there: host-local sees an empty
// store, and so does ghostwatch.
func TestCollectWipedDataDirectory(t *testing.T) {
	root := node(t, map[string]string{
		"etc/cni/net.d/10-kindnet.conflist": `{"name":"kindnet","plugins":[{"type":"ptp","ipam":{"type":"host-local","dataDir":"/run/cni-ipam-state","ranges":[[{"subnet":"10.244.2.0/24"}]]}}]}`,
		"run/":                              "",
	})
	h, err := collect(t, root)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Networks) != 1 || !h.Networks[0].Missing || len(h.Networks[0].Reservations) != 0 || len(h.Networks[0].RangeSets) != 1 {
		t.Errorf("networks %+v", h.Networks)
	}
	if d := (&Source{}).Describe(&snapshot.Snapshot{HostLocal: h}); d != "kindnet empty (no /run/cni-ipam-state/kindnet)" {
		t.Errorf("Describe = %q", d)
	}
}

func TestCollectErrors(t *testing.T) {
	kindnet := `{"name":"kindnet","plugins":[{"type":"ptp","ipam":{"type":"host-local","dataDir":"/run/cni-ipam-state","ranges":[[{"subnet":"10.244.2.0/24"}]]}}]}`
	for _, c := range []struct {
		name  string
		files map[string]string
		root  string
		want  string
	}{
		{"no root", nil, "/nonexistent/host", "host root /nonexistent/host: stat /nonexistent/host: no such file or directory (mount the node's / there, read-only)"},
		{"the data directory a configuration names is not mounted", map[string]string{"etc/cni/net.d/10-kindnet.conflist": kindnet}, "",
			"host-local's data directory /run/cni-ipam-state (dataDir of /etc/cni/net.d/10-kindnet.conflist) cannot be read under ROOT: /run is missing too, so it is most likely not mounted into ghostwatch (mount the node's /run there, read-only)"},
		{"a configuration that is not JSON", map[string]string{"etc/cni/net.d/10-x.conflist": "{name: x"}, "",
			"the CNI configuration /etc/cni/net.d/10-x.conflist is not valid JSON: invalid character 'n' looking for beginning of object key string"},
		{"a range outside its subnet", map[string]string{"etc/cni/net.d/10-x.conf": `{"name":"x","ipam":{"type":"host-local","ranges":[[{"subnet":"10.0.0.0/24","rangeStart":"10.0.1.5"}]]}}`}, "",
			"the CNI configuration /etc/cni/net.d/10-x.conf, network x, range 0 of set 0: rangeStart 10.0.1.5 is outside subnet 10.0.0.0/24"},
		{"a subnet too small", map[string]string{"etc/cni/net.d/10-x.conf": `{"name":"x","ipam":{"type":"host-local","subnet":"10.0.0.0/31"}}`}, "",
			"the CNI configuration /etc/cni/net.d/10-x.conf, network x, range 0 of set 0: subnet 10.0.0.0/31 is too small to allocate from"},
		{"last_reserved_ip holds no address", map[string]string{"var/lib/cni/networks/n/last_reserved_ip.0": "garbage"}, "",
			`/var/lib/cni/networks/n/last_reserved_ip.0 holds "garbage", not an address: host-local would start its next allocation at the range's start`},
		{"a reservation too large to be one", map[string]string{"var/lib/cni/networks/n/10.0.0.2": strings.Repeat("x", nodefs.MaxFile+1)}, "",
			"reading reservation /var/lib/cni/networks/n/10.0.0.2: larger than 1048576 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := c.root
			if root == "" {
				root = node(t, c.files)
			}
			_, err := collect(t, root)
			want := strings.ReplaceAll(c.want, "ROOT", root)
			if err == nil || err.Error() != want {
				t.Errorf("error:\n got %v\nwant %s", err, want)
			}
		})
	}
}

// What a host root may hold besides host-local's files: a named pipe where
// a file is read (which blocked the read, and the scan, forever), a
// symbolic link (which resolved against ghostwatch's own / when it was a
// parent directory), a named pipe, a socket or a directory in place of a
// reservation (which was skipped, and its address read as free), a
// network name CNI refuses (which would lead out of the data directory),
// a leftover store of a CNI the node no longer runs. Each is said, none
// blocks, and none reads the node's pods as unbooked.
func TestCollectHostRootHazards(t *testing.T) {
	kindnet := `{"name":"kindnet","plugins":[{"type":"ptp","ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.2.0/24"}]]}}]}`
	fifo := func(t *testing.T, p string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name  string
		files map[string]string
		setup func(t *testing.T, root string)
		// want is the error, or (when it starts with "describe:") what
		// Describe says of a ledger collected.
		want string
	}{
		{"a named pipe as last_reserved_ip.0", map[string]string{"etc/cni/net.d/10-kindnet.conflist": kindnet, "var/lib/cni/networks/kindnet/10.244.2.2": "c1"},
			func(t *testing.T, root string) {
				fifo(t, filepath.Join(root, "var/lib/cni/networks/kindnet/last_reserved_ip.0"))
			},
			"reading /var/lib/cni/networks/kindnet/last_reserved_ip.0: a named pipe, not a regular file: not read"},
		{"a named pipe as the CNI configuration", nil,
			func(t *testing.T, root string) { fifo(t, filepath.Join(root, "etc/cni/net.d/10-kindnet.conflist")) },
			"reading the CNI configuration /etc/cni/net.d/10-kindnet.conflist: a named pipe, not a regular file: not read"},
		{"a symbolic link as a network's store", map[string]string{"etc/cni/net.d/10-kindnet.conflist": kindnet, "elsewhere/10.244.2.2": "c1"},
			func(t *testing.T, root string) {
				os.MkdirAll(filepath.Join(root, "var/lib/cni/networks"), 0o755)
				if err := os.Symlink("/elsewhere", filepath.Join(root, "var/lib/cni/networks/kindnet")); err != nil {
					t.Fatal(err)
				}
			},
			"host-local network /var/lib/cni/networks/kindnet is a symbolic link: host-local's store is the directory /var/lib/cni/networks/kindnet itself, and ghostwatch does not follow a link (under its host root it would resolve elsewhere than on the node)"},
		{"a symbolic link as a reservation", map[string]string{"etc/cni/net.d/10-kindnet.conflist": kindnet, "var/lib/cni/networks/kindnet/10.244.2.3": "c2"},
			func(t *testing.T, root string) {
				if err := os.Symlink("/etc/shadow", filepath.Join(root, "var/lib/cni/networks/kindnet/10.244.2.2")); err != nil {
					t.Fatal(err)
				}
			},
			"reservation /var/lib/cni/networks/kindnet/10.244.2.2 is a symbolic link, not a regular file: host-local counts the address as reserved, but ghostwatch cannot read for which container, so the store /var/lib/cni/networks/kindnet is not judged (replace it with the container's reservation, or remove it if no pod holds 10.244.2.2)"},
		{"a named pipe as a reservation", map[string]string{"etc/cni/net.d/10-kindnet.conflist": kindnet, "var/lib/cni/networks/kindnet/10.244.2.3": "c2"},
			func(t *testing.T, root string) {
				fifo(t, filepath.Join(root, "var/lib/cni/networks/kindnet/10.244.2.2"))
			},
			"reservation /var/lib/cni/networks/kindnet/10.244.2.2 is a named pipe, not a regular file: host-local counts the address as reserved, but ghostwatch cannot read for which container, so the store /var/lib/cni/networks/kindnet is not judged (replace it with the container's reservation, or remove it if no pod holds 10.244.2.2)"},
		{"a socket as a reservation", map[string]string{"etc/cni/net.d/10-kindnet.conflist": kindnet, "var/lib/cni/networks/kindnet/10.244.2.3": "c2"},
			func(t *testing.T, root string) {
				if err := syscall.Mknod(filepath.Join(root, "var/lib/cni/networks/kindnet/10.244.2.2"), syscall.S_IFSOCK|0o600, 0); err != nil {
					t.Fatal(err)
				}
			},
			"reservation /var/lib/cni/networks/kindnet/10.244.2.2 is a socket, not a regular file: host-local counts the address as reserved, but ghostwatch cannot read for which container, so the store /var/lib/cni/networks/kindnet is not judged (replace it with the container's reservation, or remove it if no pod holds 10.244.2.2)"},
		{"a directory as a reservation", map[string]string{"etc/cni/net.d/10-kindnet.conflist": kindnet, "var/lib/cni/networks/kindnet/10.244.2.2/": ""}, nil,
			"reservation /var/lib/cni/networks/kindnet/10.244.2.2 is a directory, not a regular file: host-local counts the address as reserved, but ghostwatch cannot read for which container, so the store /var/lib/cni/networks/kindnet is not judged (replace it with the container's reservation, or remove it if no pod holds 10.244.2.2)"},
		{"a named pipe as the store a configuration names", map[string]string{"etc/cni/net.d/10-kindnet.conflist": kindnet},
			func(t *testing.T, root string) { fifo(t, filepath.Join(root, "var/lib/cni/networks/kindnet")) },
			"host-local network /var/lib/cni/networks/kindnet (of /etc/cni/net.d/10-kindnet.conflist) is a named pipe, not a directory: its store cannot be read, so its reservations are not judged (remove it, or make it the directory host-local keeps)"},
		{"a parent directory linked out of the host root", map[string]string{"etc/cni/net.d/10-kindnet.conflist": kindnet},
			func(t *testing.T, root string) {
				// On this host the link leads to a store; on the node,
				// whose / the root is, to nothing.
				outside := t.TempDir()
				if err := os.MkdirAll(filepath.Join(outside, "networks/kindnet"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(outside, "networks/kindnet/10.244.2.9"), []byte("outside"), 0o644); err != nil {
					t.Fatal(err)
				}
				os.MkdirAll(filepath.Join(root, "var/lib"), 0o755)
				if err := os.Symlink(outside, filepath.Join(root, "var/lib/cni")); err != nil {
					t.Fatal(err)
				}
			},
			"host-local's data directory /var/lib/cni/networks (dataDir of /etc/cni/net.d/10-kindnet.conflist) cannot be read under ROOT: /var/lib/cni is missing too, so it is most likely not mounted into ghostwatch (mount the node's /var/lib/cni there, read-only)"},
		{"a parent directory linked within the host root", map[string]string{"etc/cni/net.d/10-kindnet.conflist": kindnet, "data/cni/networks/kindnet/10.244.2.2": "c1\r\neth0"},
			func(t *testing.T, root string) {
				os.MkdirAll(filepath.Join(root, "var/lib"), 0o755)
				if err := os.Symlink("/data/cni", filepath.Join(root, "var/lib/cni")); err != nil {
					t.Fatal(err)
				}
			},
			"describe:kindnet 1 reserved"},
		{"a network named out of the data directory", map[string]string{
			"etc/cni/net.d/10-evil.conflist":    `{"name":"../../../../etc","plugins":[{"type":"ptp","ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.2.0/24"}]]}}]}`,
			"etc/cni/net.d/20-kindnet.conflist": kindnet, "var/lib/cni/networks/kindnet/10.244.2.2": "c1"}, nil,
			`describe:kindnet 1 reserved; the CNI configuration /etc/cni/net.d/10-evil.conflist names its network "../../../../etc", which CNI refuses (letters, digits, _ . and -, starting with a letter or a digit): nothing is allocated from it, and it is not read`},
		{"a leftover store on a Calico node", map[string]string{
			"etc/cni/net.d/10-calico.conflist":              `{"name":"k8s-pod-network","plugins":[{"type":"calico","ipam":{"type":"calico-ipam"}}]}`,
			"var/lib/cni/networks/k8s-pod-network/lock":     "",
			"var/lib/cni/networks/k8s-pod-network/10.1.1.1": "old"}, nil,
			"describe:k8s-pod-network 1 reserved, not judged: no CNI configuration names it, and the node's network (k8s-pod-network, plugin calico) does not hand out its addresses: a leftover store"},
		{"flannel's store, which no configuration names", map[string]string{
			"etc/cni/net.d/10-flannel.conflist":    `{"name":"cbr0","plugins":[{"type":"flannel","delegate":{"hairpinMode":true}},{"type":"portmap"}]}`,
			"var/lib/cni/networks/cbr0/10.244.2.2": "c1"}, nil,
			"describe:cbr0 1 reserved, no configuration"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := node(t, c.files)
			if c.setup != nil {
				c.setup(t, root)
			}
			done := make(chan struct{})
			var h *snapshot.HostLocal
			var err error
			go func() {
				defer close(done)
				h, err = collect(t, root)
			}()
			select {
			case <-done:
			case <-time.After(poll.Patience):
				t.Fatal("Collect hangs")
			}
			if d, ok := strings.CutPrefix(c.want, "describe:"); ok {
				if err != nil {
					t.Fatalf("Collect: %v", err)
				}
				if got := (&Source{}).Describe(&snapshot.Snapshot{HostLocal: h}); got != d {
					t.Errorf("Describe:\n got %s\nwant %s", got, d)
				}
				return
			}
			if want := strings.ReplaceAll(c.want, "ROOT", root); err == nil || err.Error() != want {
				t.Errorf("error:\n got %v\nwant %s", err, want)
			}
		})
	}
}

// A node without host-local is not a failed source.
func TestCollectUnsupported(t *testing.T) {
	root := node(t, map[string]string{
		"etc/cni/net.d/10-calico.conflist": `{"name":"k8s-pod-network","plugins":[{"type":"calico","ipam":{"type":"calico-ipam"}}]}`,
	})
	_, err := collect(t, root)
	if !errors.Is(err, source.ErrUnsupported) {
		t.Errorf("err = %v, want ErrUnsupported", err)
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{"name":"kindnet","plugins":[{"type":"ptp","ipam":{"type":"host-local","dataDir":"/run/cni-ipam-state","ranges":[[{"subnet":"10.244.2.0/24"}]]}}]}`))
	f.Add([]byte(`{"name":"dual","type":"bridge","ipam":{"type":"host-local","subnet":"10.10.0.0/16","rangeStart":"10.10.1.10","rangeEnd":"10.10.1.20","gateway":"10.10.0.1","ranges":[[{"subnet":"fd00:10::/64"}]]}}`))
	f.Add([]byte(`{"name":"x","ipam":{"type":"host-local","ranges":[[{"subnet":"10.0.0.0/30","rangeStart":"10.0.0.3","rangeEnd":"10.0.0.0"}]]}}`))
	f.Add([]byte(`{"name":"x","ipam":{"type":"host-local","ranges":[[{"subnet":"::ffff:10.0.0.0/120"}]]}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		cs, _, err := parseConfig("/etc/cni/net.d/f.conf", b)
		if err != nil {
			return
		}
		for _, c := range cs {
			if !nodefs.ValidNetworkName(c.name) || !strings.HasPrefix(c.dataDir, "/") {
				t.Errorf("network %+v", c)
			}
			for _, rs := range c.rangeSets {
				for _, r := range rs {
					if !r.Subnet.IsValid() || !r.Subnet.Contains(r.Start) || !r.Subnet.Contains(r.End) || r.End.Less(r.Start) || !r.Contains(r.Start) {
						t.Errorf("range %+v from %q", r, b)
					}
				}
			}
		}
	})
}

// Whatever a network directory holds, it is read without panic, and what
// is read is what host-local would see.
func FuzzReadNetwork(f *testing.F) {
	f.Add("10.244.2.2", []byte("fc3a04aa\r\neth0"))
	f.Add("10.244.2.2", []byte("97062860"))
	f.Add("fd00::2", []byte("id\r\neth0\r\nmore"))
	f.Add("last_reserved_ip.0", []byte("10.244.2.9\n"))
	f.Add("last_reserved_ip.x", []byte("10.244.2.9"))
	f.Add("last_reserved_ip.1", []byte("\x00\xff"))
	f.Add("lock", []byte(""))
	f.Add("10.0.0.1%eth0", []byte("zone"))
	f.Fuzz(func(t *testing.T, name string, content []byte) {
		if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") || len(name) > 200 {
			return
		}
		root := t.TempDir()
		dir := filepath.Join(root, "net")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o600); err != nil {
			return
		}
		n := &snapshot.HostLocalNetwork{Name: "net", Dir: "/net"}
		if err := readNetwork(root, n); err != nil {
			return
		}
		for _, r := range n.Reservations {
			if !r.IP.IsValid() || r.IP.Is4In6() || r.IP.Zone() != "" || strings.Contains(r.ContainerID, "\r\n") {
				t.Errorf("reservation %+v from %q = %q", r, name, content)
			}
		}
		if len(n.Reservations)+len(n.LastReserved)+n.Ignored > 1 {
			t.Errorf("one file read as %d entries", len(n.Reservations)+len(n.LastReserved)+n.Ignored)
		}
	})
}
