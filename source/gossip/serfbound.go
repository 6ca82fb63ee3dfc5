package gossip

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// A Serf agent's reply is read whole before it is decoded, and checked as
// it is read against the bounds of a member list: a msgpack array says
// how many elements follow before they come, so a reply that announces
// more than MaxMembers members (or a member whose tags are a map of a
// million entries, each one byte long) is refused before anything of it
// is decoded. Bytes alone would not bound it: 64 MiB of members of one
// byte each decode to gigabytes.

// maxSerfDepth bounds the nesting of a reply: the members reply is a map
// of an array of maps of maps.
const maxSerfDepth = 8

// errSerfBound is a reply beyond a bound of a member list.
var errSerfBound = errors.New("beyond the bounds of a member list")

// serfSkimmer reads one msgpack value from r and keeps its bytes.
type serfSkimmer struct {
	r   io.ByteReader
	raw []byte
}

// skimSerfValue reads the msgpack value r holds next and returns its bytes,
// or an error when it exceeds a bound: an array of more than MaxMembers
// elements, a map of more than maxTags entries, a string, byte string or
// extension of more than maxField bytes, nesting deeper than maxSerfDepth.
func skimSerfValue(r io.ByteReader) ([]byte, error) {
	s := &serfSkimmer{r: r}
	if err := s.value(0); err != nil {
		return nil, err
	}
	return s.raw, nil
}

func (s *serfSkimmer) byte() (byte, error) {
	b, err := s.r.ReadByte()
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, err
	}
	s.raw = append(s.raw, b)
	return b, nil
}

// n reads n bytes and returns them as a big-endian number (n at most 8).
func (s *serfSkimmer) n(n int) (uint64, error) {
	var buf [8]byte
	for i := range n {
		b, err := s.byte()
		if err != nil {
			return 0, err
		}
		buf[8-n+i] = b
	}
	return binary.BigEndian.Uint64(buf[:]), nil
}

// skip reads n bytes of a string, a byte string or an extension.
func (s *serfSkimmer) skip(n uint64, what string) error {
	if n > maxField {
		return fmt.Errorf("%w: a %s of %d bytes, more than the %d a member's name or tag holds", errSerfBound, what, n, maxField)
	}
	for range n {
		if _, err := s.byte(); err != nil {
			return err
		}
	}
	return nil
}

func (s *serfSkimmer) value(depth int) error {
	if depth > maxSerfDepth {
		return fmt.Errorf("%w: values nested more than %d deep", errSerfBound, maxSerfDepth)
	}
	b, err := s.byte()
	if err != nil {
		return err
	}
	var size int // bytes of a fixed-size value after b
	switch {
	case b <= 0x7f, b >= 0xe0, b == 0xc0, b == 0xc2, b == 0xc3:
		return nil
	case b&0xf0 == 0x80:
		return s.container(uint64(b&0x0f), true, depth)
	case b&0xf0 == 0x90:
		return s.container(uint64(b&0x0f), false, depth)
	case b&0xe0 == 0xa0:
		return s.skip(uint64(b&0x1f), "string")
	case b == 0xc4, b == 0xc5, b == 0xc6, b == 0xd9, b == 0xda, b == 0xdb:
		width := map[byte]int{0xc4: 1, 0xc5: 2, 0xc6: 4, 0xd9: 1, 0xda: 2, 0xdb: 4}[b]
		n, err := s.n(width)
		if err != nil {
			return err
		}
		return s.skip(n, "string")
	case b == 0xc7, b == 0xc8, b == 0xc9:
		n, err := s.n(map[byte]int{0xc7: 1, 0xc8: 2, 0xc9: 4}[b])
		if err != nil {
			return err
		}
		return s.skip(n+1, "extension") // and its type
	case b >= 0xd4 && b <= 0xd8:
		return s.skip(1+1<<(b-0xd4), "extension")
	case b == 0xca, b == 0xce, b == 0xd2:
		size = 4
	case b == 0xcb, b == 0xcf, b == 0xd3:
		size = 8
	case b == 0xcc, b == 0xd0:
		size = 1
	case b == 0xcd, b == 0xd1:
		size = 2
	case b == 0xdc, b == 0xdd:
		n, err := s.n(map[byte]int{0xdc: 2, 0xdd: 4}[b])
		if err != nil {
			return err
		}
		return s.container(n, false, depth)
	case b == 0xde, b == 0xdf:
		n, err := s.n(map[byte]int{0xde: 2, 0xdf: 4}[b])
		if err != nil {
			return err
		}
		return s.container(n, true, depth)
	default:
		return fmt.Errorf("%w: byte 0x%02x starts no msgpack value", errNotSerfRPC, b)
	}
	_, err = s.n(size)
	return err
}

// container reads the n entries of a map (isMap) or the n elements of an
// array, after their header, within the bounds.
func (s *serfSkimmer) container(n uint64, isMap bool, depth int) error {
	switch {
	case isMap && n > maxTags:
		return fmt.Errorf("%w: a map of %d entries, more than the %d tags a member holds", errSerfBound, n, maxTags)
	case !isMap && n > MaxMembers:
		return fmt.Errorf("%w: %w", errSerfBound, errTooManyMembers)
	}
	values := n
	if isMap {
		values = 2 * n
	}
	for range values {
		if err := s.value(depth + 1); err != nil {
			return err
		}
	}
	return nil
}
