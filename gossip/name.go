package gossip

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"regexp"
	"strings"
)

// Where NodeName looks for the pod's identity. Expose them to the
// container with the downward API:
//
//	env:
//	- name: POD_UID
//	  valueFrom: {fieldRef: {fieldPath: metadata.uid}}
//	- name: POD_NAME
//	  valueFrom: {fieldRef: {fieldPath: metadata.name}}
//
// or mount metadata.uid as the file uid of a downwardAPI volume at
// /etc/podinfo.
const (
	EnvPodUID      = "POD_UID"
	EnvPodName     = "POD_NAME"
	DefaultUIDFile = "/etc/podinfo/uid"
)

// NodeName returns a member name for this process that no other pod has
// had and no later pod will have: memberlist keys members by name, so a
// name derived from the pod IP is handed to the next pod that gets the IP,
// and the cluster takes that pod for the dead one (seed 000). See
// Identity.MemberName for where the name comes from.
func NodeName() (string, error) {
	n, err := Identity{}.MemberName()
	return n.Name, err
}

// Identity says where MemberName reads the pod's identity. Its zero value
// reads the process environment, DefaultUIDFile, the host name and
// crypto/rand.
type Identity struct {
	// Getenv reads an environment variable; os.Getenv when nil.
	Getenv func(string) string
	// UIDFile is the downward API file holding the pod UID;
	// DefaultUIDFile when empty.
	UIDFile string
	// Hostname returns the host name; os.Hostname when nil. In a pod it
	// is the pod's name, unless the pod sets spec.hostname or runs in the
	// host's network.
	Hostname func() (string, error)
	// Random supplies the random suffix; crypto/rand when nil.
	Random io.Reader
}

// MemberName is a member name and where it came from, for a log line.
type MemberName struct {
	Name string
	// From says what the name was made of, e.g. "$POD_NAME and $POD_UID".
	From string
}

// MemberName returns "<prefix>-<unique>": unique is the pod UID
// ($POD_UID, else the UID file), else 12 random hex digits; prefix, which
// only makes the name readable, is $POD_NAME, else the host name, and is
// left out when empty or when it spells an IP address (a host-network
// pod's host name often does: ip-10-0-1-50). The order, then:
//
//  1. $POD_NAME-$POD_UID (or the UID file's content)
//  2. hostname-UID, when only the UID is given
//  3. $POD_NAME-random, when the UID is not given
//  4. hostname-random
//
// A random suffix is unique to this process: a restarted container gets
// a new name, and the cluster sees its old member die and a new one join.
// The pod UID survives container restarts, so with it a restarted
// container comes back as the same member at the same address, which
// memberlist accepts (it refutes its own death with a higher incarnation).
// The error is about a UID file that exists but cannot be read.
func (id Identity) MemberName() (MemberName, error) {
	getenv := id.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	var unique, uniqueFrom string
	if uid := strings.TrimSpace(getenv(EnvPodUID)); uid != "" {
		unique, uniqueFrom = uid, "$"+EnvPodUID
	} else {
		path := id.UIDFile
		if path == "" {
			path = DefaultUIDFile
		}
		b, err := os.ReadFile(path)
		switch {
		case err == nil:
			unique, uniqueFrom = strings.TrimSpace(string(b)), path
		case !errors.Is(err, fs.ErrNotExist):
			return MemberName{}, fmt.Errorf("member name: reading the pod UID from %s: %w (mount metadata.uid there with a downwardAPI volume, or set $%s)", path, err, EnvPodUID)
		}
	}
	if unique == "" {
		r := id.Random
		if r == nil {
			r = rand.Reader
		}
		var b [6]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return MemberName{}, fmt.Errorf("member name: no pod UID ($%s, %s) and no random suffix: %w", EnvPodUID, DefaultUIDFile, err)
		}
		unique, uniqueFrom = hex.EncodeToString(b[:]), "a random suffix"
	}
	prefix, prefixFrom := strings.TrimSpace(getenv(EnvPodName)), "$"+EnvPodName
	if prefix == "" {
		hostname := id.Hostname
		if hostname == nil {
			hostname = os.Hostname
		}
		if h, err := hostname(); err == nil {
			prefix, prefixFrom = strings.TrimSpace(h), "the host name"
		}
	}
	if prefix == "" || spellsIP(prefix) {
		return MemberName{Name: unique, From: uniqueFrom}, nil
	}
	return MemberName{Name: prefix + "-" + unique, From: prefixFrom + " and " + uniqueFrom}, nil
}

// ipInName matches an IPv4 address written with dots, dashes or
// underscores, as ghostwatch's gossip-ip-identity rule reads member names.
var ipInName = regexp.MustCompile(`(^|[^0-9])([0-9]{1,3})[._-]([0-9]{1,3})[._-]([0-9]{1,3})[._-]([0-9]{1,3})($|[^0-9])`)

// spellsIP reports whether s is, or contains, an IP address.
func spellsIP(s string) bool {
	if _, err := netip.ParseAddr(s); err == nil {
		return true
	}
	return ipInName.MatchString(s)
}
