package gossip

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/ghostwatch/ghostwatch/internal/text"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
)

// Name is the source's name.
const Name = "gossip"

// maxFile bounds what one saved member list may hold: a cluster of 100,000
// members is ~30 MB of consul members -detailed.
const maxFile = 64 << 20

// FileSource reads saved member lists (--gossip-members), one view per
// file; "-" is Stdin.
type FileSource struct {
	Paths []string
	Stdin io.Reader
}

// Name returns "gossip".
func (*FileSource) Name() string { return Name }

// Collect reads every file; one that cannot be read or parsed fails the
// source, and no view of it is judged.
func (f *FileSource) Collect(_ context.Context, s *snapshot.Snapshot) error {
	g := &snapshot.Gossip{}
	for _, p := range f.Paths {
		v, err := f.parse(p)
		if err != nil {
			return err
		}
		g.Views = append(g.Views, *v)
	}
	s.Gossip = g
	return nil
}

// parse reads the member list p, decoded as it is read, at most maxFile
// bytes of it.
func (f *FileSource) parse(p string) (*snapshot.GossipView, error) {
	var r io.Reader
	if p == "-" {
		if f.Stdin == nil {
			return nil, errors.New("-: no stdin")
		}
		r = f.Stdin
	} else {
		fh, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		defer fh.Close()
		r = fh
	}
	return ParseReader(p, &bounded{r: r, left: maxFile, what: "the file"})
}

// Describe says what was read.
func (*FileSource) Describe(s *snapshot.Snapshot) string { return describe(s.Gossip) }

func describe(g *snapshot.Gossip) string {
	if g == nil {
		return ""
	}
	members, gone := 0, 0
	for _, v := range g.Views {
		members += len(v.Members)
		for i := range v.Members {
			if v.Members[i].Gone() {
				gone++
			}
		}
	}
	return fmt.Sprintf("%s, %s (%d failed, dead or left)", text.Count(len(g.Views), "view", "views"), text.Count(members, "member", "members"), gone)
}

// NotGiven is the gossip source of a scan given no member list: reading the
// members live (from pods annotated ghostwatch.io/gossip) is not built
// yet, so the gossip rules are not applicable, and say how to feed them.
type NotGiven struct{}

// Name returns "gossip".
func (NotGiven) Name() string { return Name }

// Collect reports the source unsupported.
func (NotGiven) Collect(context.Context, *snapshot.Snapshot) error {
	return source.NotGiven("no member list: pass --consul ADDR or --serf ADDR to read an agent live, or save one (consul members -detailed, serf members -format=json) and pass it with --gossip-members")
}
