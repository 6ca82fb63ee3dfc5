package gossip

import (
	"bufio"
	"bytes"
	"compress/lzw"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/memberlist"
)

// memberlist hands applications no member's state: Members() lists the
// alive and suspect members without saying which, and the Node given to
// EventDelegate.NotifyLeave has State StateAlive whether the member died
// or left, because memberlist keeps the real state in a field of its own
// that shadows Node.State (state.go nodeState; memberlist#293, open). The
// one place it tells the states is the push/pull exchange it holds with
// its peers. readState asks the local member for one, as a peer would,
// sending an empty state of its own: the member answers with every member
// it knows (dead and left ones too, until it forgets them) and merges
// nothing. The wire format below is memberlist's own (net.go
// sendAndReceiveState, sendLocalState, readStream, readRemoteState;
// security.go), the same in memberlist v0.5 to v0.7.
//
// The exchange costs the member what a push/pull from a peer costs, one
// every PushPullInterval: one stream, and a call of its delegate's
// LocalState, whose user state readState reads past without decoding.

// memberlist's message types (net.go), as the first byte of a message.
const (
	pushPullMsg byte = 6
	compressMsg byte = 9
	encryptMsg  byte = 10
	errMsg      byte = 13
)

const (
	// maxStateBytes is memberlist's maxPushStateBytes: it refuses a
	// larger state from a peer, and so does readState. A decompressed
	// state holds the user state too, and may be twice as large
	// (memberlist v0.7's maxDecompressedBytes); maxStateNodes is v0.7's
	// maxPushStateNodes.
	maxStateBytes = 20 << 20
	maxStateNodes = 1 << 20
	// lzwAlgo and lzwLitWidth are memberlist's only compression.
	lzwAlgo     = 0
	lzwLitWidth = 8
	// encryptionVersion 1 is AES-GCM without padding; every memberlist
	// since protocol version 2 reads it. Version 0 adds PKCS#7 padding.
	encryptionVersion = 1
	gcmNonceSize      = 12
)

// pushPullHeader, pushNodeState, compress and errResp are memberlist's
// structs of the same names, encoded by field name with msgpack.
type pushPullHeader struct {
	Nodes        int
	UserStateLen int
	Join         bool
}

type pushNodeState struct {
	Name        string
	Addr        []byte
	Port        uint16
	Meta        []byte
	Incarnation uint32
	State       memberlist.NodeStateType
	Vsn         []uint8
}

type compress struct {
	Algo uint8
	Buf  []byte
}

type errResp struct {
	Error string
}

// readState asks the member at addr (host:port), configured by c, for
// its state of the cluster. It dials through c.Transport when set.
func readState(ctx context.Context, c *memberlist.Config, addr string) ([]pushNodeState, error) {
	timeout := c.TCPTimeout
	if d, ok := ctx.Deadline(); ok && (timeout <= 0 || time.Until(d) < timeout) {
		timeout = time.Until(d)
	}
	if timeout <= 0 {
		return nil, context.DeadlineExceeded
	}
	var conn net.Conn
	var err error
	if c.Transport != nil {
		conn, err = c.Transport.DialTimeout(addr, timeout)
	} else {
		d := net.Dialer{Timeout: timeout}
		conn, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return nil, err
	}

	if err := memberlist.AddLabelHeaderToStream(conn, c.Label); err != nil {
		return nil, err
	}
	req, err := pushPullRequest(c)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write(req); err != nil {
		return nil, err
	}
	nodes, err := readPushPull(bufio.NewReader(conn), c)
	if err != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nodes, err
}

// pushPullRequest encodes a push/pull that carries no state, encrypted
// when c encrypts what it sends.
func pushPullRequest(c *memberlist.Config) ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte(pushPullMsg)
	if err := codec.NewEncoder(&b, &codec.MsgpackHandle{}).Encode(&pushPullHeader{}); err != nil {
		return nil, err
	}
	if !c.EncryptionEnabled() || !c.GossipVerifyOutgoing {
		return b.Bytes(), nil
	}
	key := c.Keyring.GetPrimaryKey()
	gcm, err := newGCM(key)
	if err != nil {
		return nil, err
	}
	msg := b.Bytes()
	out := make([]byte, 5, 5+1+gcmNonceSize+len(msg)+gcm.Overhead())
	out[0] = encryptMsg
	binary.BigEndian.PutUint32(out[1:5], uint32(1+gcmNonceSize+len(msg)+gcm.Overhead()))
	// The authenticated data is the message type, the length, and the
	// stream's label.
	ad := append(append([]byte(nil), out[:5]...), c.Label...)
	out = append(out, encryptionVersion)
	nonce := make([]byte, gcmNonceSize)
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	out = append(out, nonce...)
	return gcm.Seal(out, nonce, msg, ad), nil
}

// readPushPull reads a push/pull answer: decrypted, decompressed, then the
// header and the members, leaving the user state unread.
func readPushPull(r io.Reader, c *memberlist.Config) ([]pushNodeState, error) {
	var t [1]byte
	if _, err := io.ReadFull(r, t[:]); err != nil {
		return nil, fmt.Errorf("no answer: %w", err)
	}
	msgType := t[0]
	if msgType == encryptMsg {
		if !c.EncryptionEnabled() {
			return nil, errors.New("the answer is encrypted, and the configuration has no key")
		}
		var n [4]byte
		if _, err := io.ReadFull(r, n[:]); err != nil {
			return nil, err
		}
		size := binary.BigEndian.Uint32(n[:])
		if size > maxStateBytes {
			return nil, fmt.Errorf("the answer is %d bytes, more than memberlist's limit of %d", size, maxStateBytes)
		}
		sealed := make([]byte, size)
		if _, err := io.ReadFull(r, sealed); err != nil {
			return nil, err
		}
		ad := append([]byte{encryptMsg, n[0], n[1], n[2], n[3]}, c.Label...)
		plain, err := decrypt(c.Keyring.GetKeys(), sealed, ad)
		if err != nil {
			return nil, err
		}
		if len(plain) == 0 {
			return nil, errors.New("the decrypted answer is empty")
		}
		msgType, r = plain[0], bytes.NewReader(plain[1:])
	} else if c.EncryptionEnabled() && c.GossipVerifyIncoming {
		return nil, errors.New("the answer is not encrypted, and the configuration requires it")
	}

	h := &codec.MsgpackHandle{}
	dec := codec.NewDecoder(r, h)
	if msgType == compressMsg {
		var cm compress
		if err := dec.Decode(&cm); err != nil {
			return nil, fmt.Errorf("decoding the compressed answer: %w", err)
		}
		if cm.Algo != lzwAlgo {
			return nil, fmt.Errorf("the answer is compressed with algorithm %d, not LZW", cm.Algo)
		}
		lr := lzw.NewReader(bytes.NewReader(cm.Buf), lzw.LSB, lzwLitWidth)
		plain, err := io.ReadAll(io.LimitReader(lr, 2*maxStateBytes+1))
		lr.Close()
		if err != nil {
			return nil, fmt.Errorf("decompressing the answer: %w", err)
		}
		if len(plain) == 0 || len(plain) > 2*maxStateBytes {
			return nil, fmt.Errorf("the decompressed answer is %d bytes", len(plain))
		}
		msgType = plain[0]
		dec = codec.NewDecoderBytes(plain[1:], h)
	}

	switch msgType {
	case pushPullMsg:
	case errMsg:
		var e errResp
		if err := dec.Decode(&e); err != nil {
			return nil, fmt.Errorf("decoding the member's error: %w", err)
		}
		return nil, fmt.Errorf("the member refused: %s", e.Error)
	default:
		return nil, fmt.Errorf("the answer is message type %d, not push/pull (%d)", msgType, pushPullMsg)
	}
	var head pushPullHeader
	if err := dec.Decode(&head); err != nil {
		return nil, fmt.Errorf("decoding the push/pull header: %w", err)
	}
	if head.Nodes < 0 || head.Nodes > maxStateNodes {
		return nil, fmt.Errorf("the push/pull header counts %d members", head.Nodes)
	}
	nodes := make([]pushNodeState, head.Nodes)
	for i := range nodes {
		if err := dec.Decode(&nodes[i]); err != nil {
			return nil, fmt.Errorf("decoding member %d of %d: %w", i+1, head.Nodes, err)
		}
	}
	return nodes, nil
}

func newGCM(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// decrypt opens a sealed payload ([version][nonce][ciphertext and tag])
// with the first key of keys that fits, as memberlist does.
func decrypt(keys [][]byte, sealed, ad []byte) ([]byte, error) {
	if len(sealed) < 1+gcmNonceSize+16 {
		return nil, fmt.Errorf("the encrypted answer is too short (%d bytes)", len(sealed))
	}
	vsn := sealed[0]
	if vsn > encryptionVersion {
		return nil, fmt.Errorf("the answer is encrypted with version %d, not 0 or 1", vsn)
	}
	nonce, body := sealed[1:1+gcmNonceSize], sealed[1+gcmNonceSize:]
	for _, key := range keys {
		gcm, err := newGCM(key)
		if err != nil {
			continue
		}
		plain, err := gcm.Open(nil, nonce, body, ad)
		if err != nil {
			continue
		}
		if vsn == 0 && len(plain) > 0 {
			// PKCS#7: the last byte counts the padding.
			pad := int(plain[len(plain)-1])
			if pad > len(plain) {
				return nil, errors.New("the decrypted answer has a bad padding")
			}
			plain = plain[:len(plain)-pad]
		}
		return plain, nil
	}
	return nil, errors.New("no key of the keyring decrypts the answer")
}
