package gossip

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/serf/cmd/serf/command/agent"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// maxDecodeRSS bounds the peak memory (RSS) of a process that reads one
// member list of 60 MB, whatever it holds: a quarter of the controller's
// limit in the chart (1 GiB), which reads several.
const maxDecodeRSS = 256 << 20

// decodeEnv names, in a child process, the reader TestDecodeChild runs
// and its address.
const decodeEnv = "GHOSTWATCH_DECODE"

// TestDecodeChild reads one member list, as GHOSTWATCH_DECODE says
// (reader=address), and prints what came of it. It runs only in the child
// TestMemberListMemoryIsBounded starts.
func TestDecodeChild(t *testing.T) {
	reader, addr, ok := strings.Cut(os.Getenv(decodeEnv), "=")
	if !ok {
		t.Skip("run by TestMemberListMemoryIsBounded in a process of its own")
	}
	ctx := context.Background()
	var v *snapshot.GossipView
	var err error
	switch reader {
	case "consul":
		v, err = (&Consul{Addr: addr}).Members(ctx)
	case "memberlist":
		v, err = (&Endpoint{URL: addr}).Members(ctx)
	case "serf":
		v, err = (&Serf{Addr: addr}).Members(ctx)
	case "file":
		s := &snapshot.Snapshot{}
		if err = (&FileSource{Paths: []string{addr}}).Collect(ctx, s); err == nil {
			v = &s.Gossip.Views[0]
		}
	}
	if err != nil {
		fmt.Printf("error: %.300s\n", err)
	} else {
		fmt.Printf("members: %d\n", len(v.Members))
	}
	// The peak of this process's memory since it started, as the kernel
	// counts it: a child's rusage would count its parent's before exec.
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			fmt.Println(line)
		}
	}
}

// peakRSS reads the VmHWM line TestDecodeChild prints, in bytes.
func peakRSS(t *testing.T, out []byte) int64 {
	t.Helper()
	for line := range strings.SplitSeq(string(out), "\n") {
		var kb int64
		if _, err := fmt.Sscanf(line, "VmHWM: %d kB", &kb); err == nil {
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in %s", out)
	return 0
}

// Reading one member list of 60 MB (under the 64 MiB read) stays within
// maxDecodeRSS, whatever it holds: half a million small members (refused
// past MaxMembers), one member of millions of tags (refused past
// maxValue of text), and 90,000 members each at the bounds of their
// fields, which are read. Measured in a process of its own, as the peak RSS the kernel
// counts.
func TestMemberListMemoryIsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("builds member lists of 60 MB")
	}
	const size = 60 << 20
	// Small members: 130 bytes each.
	small := consulMembers(size/130, 4)
	// One member, 3.7 million tags of 16 bytes.
	var tags bytes.Buffer
	tags.WriteString(`[{"Name":"n","Addr":"10.0.0.1","Port":8301,"Status":1,"Tags":{`)
	for i := 0; tags.Len() < size; i++ {
		if i > 0 {
			tags.WriteString(",")
		}
		fmt.Fprintf(&tags, `"k%08d":"v"`, i)
	}
	tags.WriteString("}}]")
	// Members at the bounds: 90,000 of 8 tags of 64 bytes.
	var full bytes.Buffer
	full.WriteString("[")
	value := strings.Repeat("v", 64)
	for i := range 90_000 {
		if i > 0 {
			full.WriteString(",")
		}
		fmt.Fprintf(&full, `{"Name":"node-%07d","Addr":"10.%d.%d.%d","Port":8301,"Status":1,"Tags":{`, i, i>>16&255, i>>8&255, i&255)
		for j := range 8 {
			if j > 0 {
				full.WriteString(",")
			}
			fmt.Fprintf(&full, `"tag-%d":%q`, j, value)
		}
		full.WriteString("}}")
	}
	full.WriteString("]")
	var memberlist bytes.Buffer
	memberlist.WriteString(`{"kind": "ghostwatch.io/memberlist-members", "version": 1, "members": [`)
	for i := 0; memberlist.Len() < size; i++ {
		if i > 0 {
			memberlist.WriteString(",")
		}
		fmt.Fprintf(&memberlist, `{"name":"node-%07d","addr":"10.%d.%d.%d","port":7946,"state":"alive","incarnation":3}`, i, i>>16&255, i>>8&255, i&255)
	}
	memberlist.WriteString("]}")
	serve := func(body []byte) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/agent/self" {
				w.Write([]byte(`{"Config": {"NodeName": "n"}}`))
				return
			}
			w.Write(body)
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	file := filepath.Join(t.TempDir(), "members.json")
	if err := os.WriteFile(file, small, 0o644); err != nil {
		t.Fatal(err)
	}
	// A Serf agent's members reply of 60 MB: half a million members.
	h := serfMsgpack()
	var ms []agent.Member
	for i := 0; len(ms) < 500_000; i++ {
		ms = append(ms, agent.Member{Name: fmt.Sprintf("node-%07d", i), Addr: ip4, Port: 7946, Status: "alive", Tags: map[string]string{"role": "web", "dc": "dc1"}})
	}
	members := membersReply(t, h, 2, ms...)
	ms = nil
	serf := fakeSerf(t, func(command string, seq uint64) []byte {
		if command == serfHandshake {
			return frames(t, h, header(seq, ""))
		}
		return members
	})

	for _, tc := range []struct {
		name, reader, addr, want string
	}{
		{"consul, half a million members", "consul", serve(small), "more than 100000 members"},
		{"consul, one member of 3.7 million tags", "consul", serve(tags.Bytes()), "member 0: more than 1 MiB of text"},
		{"consul, 90,000 members at the bounds", "consul", serve(full.Bytes()), "members: 90000"},
		{"memberlist, 700,000 members", "memberlist", serve(memberlist.Bytes()) + MemberlistPath, "more than 100000 members"},
		{"serf, half a million members", "serf", serf, "more than 100000 members"},
		{"a saved list, half a million members", "file", file, "more than 100000 members"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestDecodeChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), decodeEnv+"="+tc.reader+"="+tc.addr)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			rss := peakRSS(t, out)
			t.Logf("peak RSS %d MiB: %s", rss>>20, bytes.SplitN(out, []byte("\n"), 2)[0])
			if !bytes.Contains(out, []byte(tc.want)) {
				t.Errorf("the child said %.400s, want %q", out, tc.want)
			}
			if rss > maxDecodeRSS {
				t.Errorf("peak RSS %d MiB, more than %d MiB", rss>>20, maxDecodeRSS>>20)
			}
		})
	}
}
