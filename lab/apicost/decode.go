package apicost

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// The API server's answers come in the encoding the client asked for:
// protobuf (kube-proxy and the agent ask for it) or JSON. A protobuf
// object or list is the four bytes "k8s\x00" and a runtime.Unknown holding
// the kind and the object's own encoding; a protobuf watch is a sequence
// of frames, each a 4-byte big-endian length and a metav1.WatchEvent whose
// object is encoded as above. A JSON watch is a sequence of JSON events.

const protobufType = "application/vnd.kubernetes.protobuf"

// InitialEventsEnd is the annotation of the bookmark that ends the initial
// events of a watch asked to send them (sendInitialEvents=true), which
// stands for a list.
const InitialEventsEnd = metav1.InitialEventsAnnotationKey

var protobufMagic = []byte{0x6b, 0x38, 0x73, 0x00}

// errUnsupported is returned for an encoding the decoders do not read.
var errUnsupported = errors.New("unsupported content type")

// isProtobuf reports whether contentType is the Kubernetes protobuf
// encoding (a watch stream's included).
func isProtobuf(contentType string) (bool, error) {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false, fmt.Errorf("content type %q: %w", contentType, err)
	}
	switch {
	case mt == protobufType:
		return true, nil
	case mt == "application/json":
		return false, nil
	}
	return false, fmt.Errorf("%w %q", errUnsupported, contentType)
}

// countObjects reads an answer that is not a watch and returns how many
// objects it holds: a list's items, 1 for an object, 0 for a Status.
func countObjects(r io.Reader, contentType string) (int, error) {
	pb, err := isProtobuf(contentType)
	if err != nil {
		return 0, err
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return 0, err
	}
	if pb {
		u, err := unwrap(b)
		if err != nil {
			return 0, err
		}
		switch {
		case u.Kind == "Status":
			return 0, nil
		case strings.HasSuffix(u.Kind, "List"):
			// Every list's items are its field 2.
			return countField(u.Raw, 2)
		}
		return 1, nil
	}
	var obj struct {
		Kind  string            `json:"kind"`
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(b, &obj); err != nil {
		return 0, fmt.Errorf("JSON answer: %w", err)
	}
	switch {
	case obj.Kind == "Status":
		return 0, nil
	case strings.HasSuffix(obj.Kind, "List"):
		return len(obj.Items), nil
	}
	return 1, nil
}

// unwrap reads the protobuf envelope of an object.
func unwrap(b []byte) (*runtime.Unknown, error) {
	if !bytes.HasPrefix(b, protobufMagic) {
		return nil, errors.New("protobuf answer without the k8s\\x00 prefix")
	}
	u := &runtime.Unknown{}
	if err := u.Unmarshal(b[len(protobufMagic):]); err != nil {
		return nil, fmt.Errorf("protobuf envelope: %w", err)
	}
	return u, nil
}

// countField counts the occurrences of the length-delimited field num at
// the top level of the protobuf message b.
func countField(b []byte, num uint64) (int, error) {
	n := 0
	for len(b) > 0 {
		tag, l := binary.Uvarint(b)
		if l <= 0 {
			return 0, errors.New("protobuf: bad tag")
		}
		b = b[l:]
		var skip uint64
		switch tag & 7 {
		case 0:
			if _, l = binary.Uvarint(b); l <= 0 {
				return 0, errors.New("protobuf: bad varint")
			}
			skip = uint64(l)
		case 1:
			skip = 8
		case 2:
			size, l := binary.Uvarint(b)
			if l <= 0 {
				return 0, errors.New("protobuf: bad length")
			}
			b = b[l:]
			skip = size
			if tag>>3 == num {
				n++
			}
		case 5:
			skip = 4
		default:
			return 0, fmt.Errorf("protobuf: wire type %d", tag&7)
		}
		if uint64(len(b)) < skip {
			return 0, errors.New("protobuf: truncated")
		}
		b = b[skip:]
	}
	return n, nil
}

// WatchEvent is what decodeWatch reports of each event: its type (ADDED,
// MODIFIED, DELETED, BOOKMARK, ERROR) and, for a bookmark, whether it ends
// the initial events.
type WatchEvent struct {
	Type       string
	InitialEnd bool
}

// decodeWatch reads a watch stream to its end, calling event for each
// event as it arrives.
func decodeWatch(r io.Reader, contentType string, event func(WatchEvent)) error {
	pb, err := isProtobuf(contentType)
	if err != nil {
		return err
	}
	if !pb {
		dec := json.NewDecoder(r)
		for {
			var ev struct {
				Type   string `json:"type"`
				Object struct {
					Metadata struct {
						Annotations map[string]string `json:"annotations"`
					} `json:"metadata"`
				} `json:"object"`
			}
			if err := dec.Decode(&ev); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return fmt.Errorf("JSON watch event: %w", err)
			}
			event(WatchEvent{Type: ev.Type, InitialEnd: ev.Type == string(watch.Bookmark) && ev.Object.Metadata.Annotations[InitialEventsEnd] == "true"})
		}
	}
	var size [4]byte
	for {
		if _, err := io.ReadFull(r, size[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("protobuf watch frame: %w", err)
		}
		frame := make([]byte, binary.BigEndian.Uint32(size[:]))
		if _, err := io.ReadFull(r, frame); err != nil {
			return fmt.Errorf("protobuf watch frame of %d bytes: %w", len(frame), err)
		}
		var ev metav1.WatchEvent
		if err := ev.Unmarshal(frame); err != nil {
			return fmt.Errorf("protobuf watch event: %w", err)
		}
		we := WatchEvent{Type: ev.Type}
		if ev.Type == string(watch.Bookmark) {
			we.InitialEnd = initialEnd(ev.Object.Raw)
		}
		event(we)
	}
}

// initialEnd reports whether the protobuf object raw carries the
// InitialEventsEnd annotation. Every object's metadata is its field 1, so
// it is read as a PartialObjectMetadata whatever its kind.
func initialEnd(raw []byte) bool {
	u, err := unwrap(raw)
	if err != nil {
		return false
	}
	var m metav1.PartialObjectMetadata
	if err := m.Unmarshal(u.Raw); err != nil {
		return false
	}
	return m.Annotations[InitialEventsEnd] == "true"
}
