//go:build linux

package conntrack

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// GetEach and DeleteEach answer each entry as Get and Delete do, over more
// than one batch, with one entry's failure its own.
func TestGetEachAndDeleteEach(t *testing.T) {
	t.Parallel()
	inNewNetns(t)
	c := open(t)
	flows := labFlows() // IPv4 and IPv6; TCP, UDP and SCTP; zones 3 and 7
	create(t, c, flows)
	fill(t, c, 2*maxBatch+10)
	dumped := dumpAll(t, c)
	// Among the entries, some the kernel does not have: another source
	// port, or an entry's reply tuple as the original (the kernel finds
	// the entry by it, which is not the entry asked for).
	var asked []snapshot.Flow
	missingAt := map[int]bool{}
	byReply := map[int]bool{}
	k := 0
	for _, f := range dumped {
		if k%97 == 3 {
			m := f
			if k%2 == 0 {
				m.Orig = f.Reply
				byReply[len(asked)] = true
			} else {
				m.Orig.SrcPort = 1
			}
			missingAt[len(asked)] = true
			asked = append(asked, m)
		}
		asked = append(asked, f)
		k++
	}
	if len(byReply) == 0 || len(missingAt) == len(byReply) || len(asked) <= 2*maxBatch {
		t.Fatalf("%d entries, %d missing, %d by their reply: pick others", len(asked), len(missingAt), len(byReply))
	}

	next := 0
	type answer struct {
		got snapshot.Flow
		err error
	}
	var answers []answer
	askedAt := time.Now()
	err := c.GetEach(asked, func(i int, got snapshot.Flow, err error) {
		if i != next {
			t.Fatalf("answer for entry %d, want %d: answers must come in order", i, next)
		}
		next++
		answers = append(answers, answer{got, err})
	})
	if err != nil || next != len(asked) {
		t.Fatalf("GetEach: %v after %d of %d answers", err, next, len(asked))
	}
	for i, a := range answers {
		single, singleErr := c.Get(&asked[i])
		switch {
		case missingAt[i]:
			if !errors.Is(a.err, syscall.ENOENT) || !errors.Is(singleErr, syscall.ENOENT) {
				t.Errorf("%v: GetEach %v, Get %v; want ENOENT from both", &asked[i], a.err, singleErr)
			}
		case a.err != nil:
			t.Errorf("%v: %v", &asked[i], a.err)
		default:
			// The answer to GetEach came first: Get's is the later.
			sameEntry(t, &single, &a.got, askedAt)
		}
	}

	// Delete every entry, the missing ones and one whose ID is no longer
	// its entry's among them. (A delete by an entry's reply tuple would
	// delete it: the kernel looks the tuple up in both directions; the
	// remedy never deletes what did not read back as itself.)
	var del []snapshot.Flow
	missing := map[int]bool{}
	for i, f := range asked {
		if byReply[i] {
			continue
		}
		if missingAt[i] {
			missing[len(del)] = true
		}
		del = append(del, f)
	}
	asked, missingAt = del, missing
	if missingAt[5] {
		t.Fatal("entry 5 is one of the missing: pick another")
	}
	asked[5].ID++
	next = 0
	err = c.DeleteEach(asked, func(i int, err error) {
		if i != next {
			t.Fatalf("outcome for entry %d, want %d", i, next)
		}
		next++
		switch {
		case missingAt[i] || i == 5:
			if !errors.Is(err, syscall.ENOENT) {
				t.Errorf("deleting %v: %v, want ENOENT", &asked[i], err)
			}
		case err != nil:
			t.Errorf("deleting %v: %v", &asked[i], err)
		}
	})
	if err != nil || next != len(asked) {
		t.Fatalf("DeleteEach: %v after %d of %d outcomes", err, next, len(asked))
	}
	left := dumpAll(t, c)
	if len(left) != 1 {
		t.Errorf("%d entries left, want 1 (the one whose ID did not match): %v", len(left), left)
	}
	if _, ok := left[keyOf(&asked[5])]; !ok {
		t.Errorf("the entry whose ID did not match was deleted")
	}

	// The connection works as before afterwards, and nothing is nothing.
	if err := c.DeleteEach(nil, func(int, error) { t.Error("an outcome for no entry") }); err != nil {
		t.Error(err)
	}
	if _, err := c.Get(&asked[5]); err != nil {
		t.Errorf("Get after the batches: %v", err)
	}
}
