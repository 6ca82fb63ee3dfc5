package gossip

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Bounds of the views read back as snapshot.Gossip marshals them (a
// bundle's, as the controller's leader last read them): a view holds at
// most MaxMembers members, all the views together maxSavedMembers, a
// member's tags at most maxTags; a string at most maxSavedString bytes
// (an Unread error may be longer than a member's field). They are
// checked on the text before it is decoded.
const (
	maxSavedMembers = 4 * MaxMembers
	maxSavedString  = 64 << 10
	maxSavedDepth   = 8
)

// ReadViews decodes the views of gossip clusters saved as snapshot.Gossip
// marshals them, which name names in errors. JSON beyond the bounds of
// member lists is refused, naming the bound, before any of it is decoded:
// its size alone does not bound what it decodes to (64 MiB of members
// that are empty objects are three million members).
func ReadViews(name string, data []byte) (*snapshot.Gossip, error) {
	if err := checkSavedJSON(data); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	g := &snapshot.Gossip{}
	if err := json.Unmarshal(data, g); err != nil {
		return nil, fmt.Errorf("%s:%w", name, jsonError(data, err))
	}
	return g, nil
}

// checkSavedJSON checks the structure of a JSON text against the bounds of
// saved views, byte by byte, decoding nothing: every array at most
// MaxMembers elements and all of them together maxSavedMembers, every
// object at most maxTags keys, every string at most maxSavedString bytes,
// nesting at most maxSavedDepth deep. Syntax is left to the decoder.
func checkSavedJSON(data []byte) error {
	type open struct {
		object bool
		n      int // elements, or keys and values
	}
	var (
		stack    []open
		total    int
		inString bool
		escaped  bool
		strLen   int
	)
	for _, c := range data {
		if inString {
			strLen++
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			if strLen > maxSavedString {
				return fmt.Errorf("a string of more than %d KiB, which no view holds", maxSavedString>>10)
			}
			continue
		}
		switch c {
		case '"':
			inString, strLen = true, 0
		case '[', '{':
			if len(stack) == maxSavedDepth {
				return fmt.Errorf("values nested more than %d deep, as no view is", maxSavedDepth)
			}
			stack = append(stack, open{object: c == '{'})
		case ']', '}':
			if len(stack) == 0 {
				return nil // the decoder says what is wrong
			}
			stack = stack[:len(stack)-1]
		case ',', ':':
			if len(stack) == 0 {
				return nil
			}
			top := &stack[len(stack)-1]
			top.n++
			switch {
			case !top.object && top.n >= MaxMembers:
				return fmt.Errorf("%w", errTooManyMembers)
			case top.object && top.n >= 2*maxTags:
				return fmt.Errorf("an object of more than %d keys, more than the %d tags a member holds", maxTags, maxTags)
			case !top.object:
				total++
				if total > maxSavedMembers {
					return fmt.Errorf("more than %d members in all the views: they are bounded to %d each, and to %d together", maxSavedMembers, MaxMembers, maxSavedMembers)
				}
			}
		}
	}
	if inString {
		return errors.New("unexpected end of JSON input")
	}
	return nil
}
