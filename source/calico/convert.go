package calico

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Name is the source name recorded in snapshots.
const Name = "calico"

// The kinds of Calico's objects the ledger is made of.
const (
	KindIPAMBlock       = "IPAMBlock"
	KindIPAMHandle      = "IPAMHandle"
	KindBlockAffinity   = "BlockAffinity"
	KindIPPool          = "IPPool"
	KindKubeControllers = "KubeControllersConfiguration"
)

// Kinds lists them.
var Kinds = []string{KindIPAMBlock, KindIPAMHandle, KindBlockAffinity, KindIPPool, KindKubeControllers}

// The API versions they are read in: crd.projectcalico.org/v1, as Calico's
// kubernetes datastore stores them, and projectcalico.org/v3, as calicoctl
// prints IPPools and the KubeControllersConfiguration (and as Calico
// releases that store v3 objects keep them all). The specs of the five kinds
// are the same in both, but for a BlockAffinity's deleted: a string in v1,
// a boolean in v3, both read.
const (
	APIVersion   = "crd.projectcalico.org/v1"
	APIVersionV3 = "projectcalico.org/v3"
)

// SaveCommand is the kubectl command that saves the ledger (the objects are
// cluster-scoped).
const SaveCommand = "kubectl get ipamblocks.crd.projectcalico.org,ipamhandles.crd.projectcalico.org," +
	"blockaffinities.crd.projectcalico.org,ippools.crd.projectcalico.org," +
	"kubecontrollersconfigurations.crd.projectcalico.org -o yaml"

// Is reports whether apiVersion and kind name one of the ledger's kinds.
func Is(apiVersion, kind string) bool {
	return (apiVersion == APIVersion || apiVersion == APIVersionV3) && slices.Contains(Kinds, kind)
}

// Add converts obj, one of the ledger's kinds as unstructured data (what
// the dynamic client returns, or JSON decoded into map[string]any,
// preferably with UseNumber), into c. It reports false, and leaves c alone,
// for any other kind, and for a KubeControllersConfiguration not named
// "default" (kube-controllers reads only that one). Call Sort once every
// object is added.
func Add(c *snapshot.Calico, obj map[string]any) bool {
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	if !Is(apiVersion, kind) {
		return false
	}
	switch kind {
	case KindIPAMBlock:
		c.Blocks = append(c.Blocks, Block(obj))
	case KindIPAMHandle:
		c.Handles = append(c.Handles, Handle(obj))
	case KindBlockAffinity:
		c.Affinities = append(c.Affinities, Affinity(obj))
	case KindIPPool:
		c.Pools = append(c.Pools, Pool(obj))
	case KindKubeControllers:
		gc, ok := LeakGC(obj)
		if !ok {
			return false
		}
		c.LeakGC = &gc
	}
	return true
}

// Sort orders the objects of each kind by name, as the API server lists
// them.
func Sort(c *snapshot.Calico) {
	slices.SortStableFunc(c.Blocks, func(a, b snapshot.IPAMBlock) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortStableFunc(c.Handles, func(a, b snapshot.IPAMHandle) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortStableFunc(c.Affinities, func(a, b snapshot.BlockAffinity) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortStableFunc(c.Pools, func(a, b snapshot.IPPool) int { return cmp.Compare(a.Name, b.Name) })
}

// maxProblems bounds the problems listed for one object; the rest are
// counted.
const maxProblems = 16

// problems gathers what is wrong with one object.
type problems struct {
	list []string
	more int
}

func (p *problems) add(format string, args ...any) {
	if len(p.list) >= maxProblems {
		p.more++
		return
	}
	p.list = append(p.list, fmt.Sprintf(format, args...))
}

func (p *problems) done() []string {
	if p.more > 0 {
		return append(p.list, fmt.Sprintf("and %d more problems", p.more))
	}
	return p.list
}

// nameOf is metadata.name.
func nameOf(obj map[string]any) string {
	md, _ := obj["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	return name
}

// specOf is obj's spec, or nil with a problem.
func specOf(obj map[string]any, p *problems) map[string]any {
	switch spec := obj["spec"].(type) {
	case map[string]any:
		return spec
	case nil:
		p.add("no spec")
	default:
		p.add("spec is %s, not an object", what(spec))
	}
	return nil
}

// Block converts an IPAMBlock. Whatever it cannot read or place is in
// Malformed, and every allocation it returns lies in the block's CIDR at
// its ordinal.
func Block(obj map[string]any) snapshot.IPAMBlock {
	var p problems
	b := snapshot.IPAMBlock{Name: nameOf(obj)}
	spec := specOf(obj, &p)
	if spec == nil {
		b.Malformed = p.done()
		return b
	}
	b.CIDR = prefix(spec, "cidr", &p)
	b.Affinity, b.OtherAffinity = affinity(spec, &p)
	b.Deleted = boolean(spec, "deleted", &p)
	if v, ok := spec["sequenceNumber"]; ok && v != nil {
		n, err := unsigned(v)
		if err != nil {
			p.add("sequenceNumber %s", err)
		}
		b.SequenceNumber = n
	}
	attrs := attributes(spec, &p)

	// The block holds 2^(host bits) addresses; ordinals are tracked in a
	// slice as long as the block is no larger than Calico's largest (a /20
	// or a /116, 4096 addresses), beyond that in a map.
	size := 0
	if b.CIDR.IsValid() {
		host := b.CIDR.Addr().BitLen() - b.CIDR.Bits()
		size = 1 << min(host, 40)
		if host > maxBlockBits {
			p.add("cidr %s holds %d addresses, more than any Calico block (%d)", b.CIDR, size, 1<<maxBlockBits)
		}
	}
	taken := newOrdinals(size)

	allocs, _ := list(spec, "allocations", true, &p)
	if b.CIDR.IsValid() && len(allocs) != size {
		p.add("allocations has %d entries for the %d addresses of %s", len(allocs), size, b.CIDR)
	}
	unplaced, unreadable := 0, 0
	for ord, v := range allocs {
		if v == nil {
			continue
		}
		idx, err := integer(v)
		switch {
		case err != nil:
			p.add("allocations[%d] %s: not an attribute index", ord, err)
			unreadable++
			continue
		case !b.CIDR.IsValid() || ord >= size:
			// Its attribute is used, though the address cannot be placed.
			if idx >= 0 && idx < int64(len(attrs)) {
				attrs[idx].used = true
			}
			if b.CIDR.IsValid() {
				p.add("allocations[%d] is allocated, beyond the %d addresses of %s", ord, size, b.CIDR)
			} else {
				unplaced++
			}
			continue
		}
		ip := snapshot.BlockAddr(b.CIDR, ord)
		taken.set(ord, ordAllocated)
		if idx < 0 || idx >= int64(len(attrs)) {
			p.add("allocation %d (%s) points at attribute %d; the block has %d", ord, ip, idx, len(attrs))
			b.Allocations = append(b.Allocations, snapshot.Allocation{Ordinal: ord, IP: ip})
			continue
		}
		a := &attrs[idx]
		a.used = true
		if a.cooldown {
			taken.set(ord, ordCooldown)
			b.Cooldown = append(b.Cooldown, snapshot.Cooldown{Ordinal: ord, IP: ip, ReleasedAt: a.releasedAt})
			continue
		}
		b.Allocations = append(b.Allocations, snapshot.Allocation{
			Ordinal: ord, IP: ip, HandleID: a.handle,
			Node: a.node, Pod: a.pod, Namespace: a.namespace, Type: a.typ, Service: a.service,
			Timestamp: a.timestamp,
		})
	}
	if unplaced > 0 {
		p.add("%d allocated ordinals cannot be placed without the block's CIDR", unplaced)
	}
	for i, a := range attrs {
		if !a.used {
			p.add("attributes[%d] is used by no allocation", i)
		}
	}

	free, _ := list(spec, "unallocated", true, &p)
	for i, v := range free {
		ord, err := integer(v)
		switch {
		case err != nil:
			p.add("unallocated[%d] %s: not an ordinal", i, err)
		case !b.CIDR.IsValid():
		case ord < 0 || ord >= int64(size):
			p.add("unallocated[%d] is ordinal %d, outside the %d addresses of %s", i, ord, size, b.CIDR)
		default:
			switch taken.get(int(ord)) {
			case ordFree:
				p.add("ordinal %d is listed twice in unallocated", ord)
			case ordAllocated:
				ip := snapshot.BlockAddr(b.CIDR, int(ord))
				p.add("ordinal %d (%s) is both allocated and in unallocated", ord, ip)
				b.Reissuable = append(b.Reissuable, ip)
			case ordCooldown:
				p.add("ordinal %d (%s) is both in cooldown and in unallocated", ord, snapshot.BlockAddr(b.CIDR, int(ord)))
			default:
				taken.set(int(ord), ordFree)
				b.Free = append(b.Free, int(ord))
			}
		}
	}
	if b.CIDR.IsValid() && size <= 1<<maxBlockBits && len(allocs) == size {
		if lost := size - len(b.Allocations) - len(b.Cooldown) - len(b.Free) - unreadable; lost > 0 {
			p.add("%d of the %d addresses are neither allocated nor in unallocated: Calico never hands them out", lost, size)
		}
	}

	seqs(spec, &b, &p)
	b.Malformed = p.done()
	return b
}

// maxBlockBits is the host bits of Calico's largest blocks: IPv4 pools take
// block sizes 20 to 32, IPv6 ones 116 to 128.
const maxBlockBits = 12

// What an ordinal of a block is, as read.
const (
	ordUnseen uint8 = iota
	ordAllocated
	ordCooldown
	ordFree
)

// ordinals records what each ordinal of a block is.
type ordinals struct {
	small []uint8
	large map[int]uint8
}

func newOrdinals(size int) *ordinals {
	if size <= 1<<maxBlockBits {
		return &ordinals{small: make([]uint8, size)}
	}
	return &ordinals{large: map[int]uint8{}}
}

func (o *ordinals) get(i int) uint8 {
	if o.large != nil {
		return o.large[i]
	}
	return o.small[i]
}

func (o *ordinals) set(i int, v uint8) {
	if o.large != nil {
		o.large[i] = v
		return
	}
	o.small[i] = v
}

// attribute is one entry of a block's attributes.
type attribute struct {
	handle, node, pod, namespace, typ, service string
	timestamp                                  time.Time
	cooldown                                   bool
	releasedAt                                 time.Time
	used                                       bool
}

// attributes reads spec.attributes.
func attributes(spec map[string]any, p *problems) []attribute {
	l, _ := list(spec, "attributes", true, p)
	out := make([]attribute, len(l))
	for i, v := range l {
		m, ok := v.(map[string]any)
		if !ok {
			p.add("attributes[%d] is %s, not an object", i, what(v))
			continue
		}
		a := &out[i]
		where := fmt.Sprintf("attributes[%d].", i)
		a.handle = str(m, "handle_id", where, p)
		if v, ok := m["releasedAt"]; ok && v != nil {
			a.cooldown = true
			a.releasedAt = stamp(v, where+"releasedAt", p)
		}
		switch sec := m["secondary"].(type) {
		case nil:
		case map[string]any:
			where += "secondary."
			a.node = str(sec, "node", where, p)
			a.pod = str(sec, "pod", where, p)
			a.namespace = str(sec, "namespace", where, p)
			a.typ = str(sec, "type", where, p)
			a.service = str(sec, "service", where, p)
			if s := str(sec, "timestamp", where, p); s != "" {
				a.timestamp = stamp(s, where+"timestamp", p)
			}
		default:
			p.add("%ssecondary is %s, not an object", where, what(sec))
		}
	}
	return out
}

// seqs reads spec.sequenceNumberForAllocation into b's allocations.
func seqs(spec map[string]any, b *snapshot.IPAMBlock, p *problems) {
	var m map[string]any
	switch v := spec["sequenceNumberForAllocation"].(type) {
	case nil:
		return
	case map[string]any:
		m = v
	default:
		p.add("sequenceNumberForAllocation is %s, not an object", what(v))
		return
	}
	// Keys in order, so that the problems come in the same order each time.
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		ord, err := strconv.Atoi(k)
		if err != nil {
			p.add("sequenceNumberForAllocation has key %q, not an ordinal", k)
			continue
		}
		n, err := unsigned(m[k])
		if err != nil {
			p.add("sequenceNumberForAllocation[%q] %s", k, err)
			continue
		}
		i, found := slices.BinarySearchFunc(b.Allocations, ord, func(a snapshot.Allocation, o int) int { return cmp.Compare(a.Ordinal, o) })
		if found {
			b.Allocations[i].SequenceNumber = n
		}
	}
}

// affinity reads spec.affinity: the node of "host:<node>", or the whole
// value when it is not one.
func affinity(spec map[string]any, p *problems) (node, other string) {
	s := str(spec, "affinity", "", p)
	switch {
	case s == "":
		return "", ""
	case strings.HasPrefix(s, "host:") && len(s) > len("host:"):
		return s[len("host:"):], ""
	case strings.HasPrefix(s, "virtual:") && len(s) > len("virtual:"):
		return "", s
	}
	p.add("affinity %q is neither host:<node> nor virtual:<name>", s)
	return "", s
}

// Handle converts an IPAMHandle.
func Handle(obj map[string]any) snapshot.IPAMHandle {
	var p problems
	h := snapshot.IPAMHandle{Name: nameOf(obj)}
	spec := specOf(obj, &p)
	if spec == nil {
		h.Malformed = p.done()
		return h
	}
	h.ID = str(spec, "handleID", "", &p)
	switch {
	case h.ID == "":
		p.add("no handleID")
	case h.Name != strings.ToLower(h.ID):
		p.add("named %s, not %s: Calico finds a handle by its ID lowercased", h.Name, strings.ToLower(h.ID))
	}
	h.Deleted = boolean(spec, "deleted", &p)
	switch blocks := spec["block"].(type) {
	case nil:
	case map[string]any:
		for k, v := range blocks {
			cidr, err := netip.ParsePrefix(k)
			if err != nil {
				p.add("block has key %q, not a CIDR", k)
				continue
			}
			n, err := integer(v)
			switch {
			case err != nil:
				p.add("block[%q] %s", k, err)
				continue
			case n <= 0 || n > math.MaxInt32:
				p.add("block[%q] counts %d addresses", k, n)
			}
			h.Blocks = append(h.Blocks, snapshot.HandleBlock{CIDR: cidr, Count: int(max(min(n, math.MaxInt32), math.MinInt32))})
		}
		slices.SortFunc(h.Blocks, func(a, b snapshot.HandleBlock) int {
			return cmp.Or(a.CIDR.Addr().Compare(b.CIDR.Addr()), cmp.Compare(a.CIDR.Bits(), b.CIDR.Bits()))
		})
	default:
		p.add("block is %s, not an object", what(blocks))
	}
	h.Malformed = p.done()
	return h
}

// Affinity converts a BlockAffinity.
func Affinity(obj map[string]any) snapshot.BlockAffinity {
	var p problems
	a := snapshot.BlockAffinity{Name: nameOf(obj)}
	spec := specOf(obj, &p)
	if spec == nil {
		a.Malformed = p.done()
		return a
	}
	a.CIDR = prefix(spec, "cidr", &p)
	if a.Node = str(spec, "node", "", &p); a.Node == "" {
		p.add("no node")
	}
	switch a.State = str(spec, "state", "", &p); a.State {
	case "confirmed", "pending", "pendingDeletion":
	default:
		p.add("state %q is none of confirmed, pending, pendingDeletion", a.State)
	}
	if a.Type = str(spec, "type", "", &p); a.Type == "" {
		a.Type = "host"
	}
	// A string in crd.projectcalico.org/v1, which Calico reads with
	// strconv.ParseBool; a boolean in projectcalico.org/v3.
	switch d := spec["deleted"].(type) {
	case nil:
	case bool:
		a.Deleted = d
	case string:
		if d != "" {
			v, err := strconv.ParseBool(d)
			if err != nil {
				p.add("deleted is %q, neither true nor false: Calico cannot read the affinity", d)
			}
			a.Deleted = v
		}
	default:
		p.add("deleted is %s, not a string", what(d))
	}
	a.Malformed = p.done()
	return a
}

// Pool converts an IPPool.
func Pool(obj map[string]any) snapshot.IPPool {
	var p problems
	pl := snapshot.IPPool{Name: nameOf(obj)}
	spec := specOf(obj, &p)
	if spec == nil {
		pl.Malformed = p.done()
		return pl
	}
	pl.CIDR = prefix(spec, "cidr", &p)
	if v, ok := spec["blockSize"]; ok && v != nil {
		n, err := integer(v)
		switch {
		case err != nil:
			p.add("blockSize %s", err)
		case n < 0 || n > 128 || pl.CIDR.IsValid() && (int(n) > pl.CIDR.Addr().BitLen() || int(n) < pl.CIDR.Bits()):
			p.add("blockSize %d does not fit the pool %s", n, pl.CIDR)
		default:
			pl.BlockSize = int(n)
		}
	}
	pl.Disabled = boolean(spec, "disabled", &p)
	pl.NodeSelector = str(spec, "nodeSelector", "", &p)
	uses, _ := list(spec, "allowedUses", false, &p)
	for i, u := range uses {
		s, ok := u.(string)
		if !ok {
			p.add("allowedUses[%d] is %s, not a string", i, what(u))
			continue
		}
		pl.AllowedUses = append(pl.AllowedUses, s)
	}
	pl.Malformed = p.done()
	return pl
}

// LeakGC reads the leak collector's configuration from a
// KubeControllersConfiguration; ok is false when it is not the one named
// "default", the only one kube-controllers reads.
func LeakGC(obj map[string]any) (gc snapshot.LeakGC, ok bool) {
	if nameOf(obj) != "default" {
		return gc, false
	}
	var p problems
	// What the running kube-controllers last reported, its environment
	// applied, when it did; else what it is told.
	// calicoctl stores an empty runningConfig (no controller) with the
	// spec it applies, before any kube-controllers ran: not a report.
	from := "status.runningConfig"
	cfg, _ := obj["status"].(map[string]any)
	cfg, _ = cfg["runningConfig"].(map[string]any)
	if ctrls, _ := cfg["controllers"].(map[string]any); len(ctrls) == 0 {
		cfg = nil
	}
	if cfg == nil {
		// No kube-controllers has reported: the spec is what the
		// collector runs with once one starts.
		from = "spec"
		if cfg = specOf(obj, &p); cfg == nil {
			gc.From = "no spec: kube-controllers cannot read its configuration"
			gc.Malformed = p.done()
			return gc, true
		}
	}
	node, err := path(cfg, "controllers", "node")
	switch {
	case err != nil:
		p.add("%s.controllers.node: %s", from, err)
		gc.From = from + ".controllers.node is unreadable"
	case node == nil:
		gc.From = from + ".controllers.node is unset: the node controller, which runs the collector, is off"
	default:
		from += ".controllers.node.leakGracePeriod"
		switch v := node["leakGracePeriod"].(type) {
		case nil:
			gc.From = from + " is unset: the collector frees no allocation of a live node"
		case string:
			d, err := time.ParseDuration(v)
			switch {
			case err != nil:
				p.add("%s is %q, not a duration", from, v)
				gc.From = from + " is unreadable"
			case d < 0:
				p.add("%s is %s, negative", from, v)
				gc.From = from + " is negative: the collector frees no allocation of a live node"
			case d == 0:
				gc.From = from + " is 0: the collector frees no allocation of a live node"
			default:
				gc.GracePeriod, gc.From = d, from
			}
		default:
			p.add("%s is %s, not a duration", from, what(v))
			gc.From = from + " is unreadable"
		}
	}
	gc.Malformed = p.done()
	return gc, true
}

// path follows keys through nested objects: nil when one is absent, an
// error when one is not an object.
func path(m map[string]any, keys ...string) (map[string]any, error) {
	for _, k := range keys {
		switch v := m[k].(type) {
		case nil:
			return nil, nil
		case map[string]any:
			m = v
		default:
			return nil, fmt.Errorf("%s is %s, not an object", k, what(v))
		}
	}
	return m, nil
}

// str reads a string field; "" when absent or of another type (a
// problem).
func str(m map[string]any, key, where string, p *problems) string {
	switch v := m[key].(type) {
	case nil:
	case string:
		return v
	default:
		p.add("%s%s is %s, not a string", where, key, what(v))
	}
	return ""
}

// boolean reads a boolean field; false when absent or of another type (a
// problem).
func boolean(m map[string]any, key string, p *problems) bool {
	switch v := m[key].(type) {
	case nil:
	case bool:
		return v
	default:
		p.add("%s is %s, not a boolean", key, what(v))
	}
	return false
}

// list reads a list field; a problem when it is absent and required, or of
// another type.
func list(m map[string]any, key string, required bool, p *problems) ([]any, bool) {
	switch v := m[key].(type) {
	case []any:
		return v, true
	case nil:
		if _, present := m[key]; required && !present {
			p.add("no %s", key)
		}
	default:
		p.add("%s is %s, not a list", key, what(v))
	}
	return nil, false
}

// prefix reads a CIDR field. A CIDR with host bits set reads as its
// network, as Calico reads it, and is a problem.
func prefix(m map[string]any, key string, p *problems) netip.Prefix {
	v, present := m[key]
	s, ok := v.(string)
	switch {
	case !present || v == nil:
		p.add("no %s", key)
		return netip.Prefix{}
	case !ok:
		p.add("%s is %s, not a CIDR", key, what(v))
		return netip.Prefix{}
	}
	pf, err := netip.ParsePrefix(s)
	if err != nil {
		p.add("%s %q is not a CIDR", key, s)
		return netip.Prefix{}
	}
	if pf.Masked() != pf {
		p.add("%s %s has host bits set; read as %s", key, s, pf.Masked())
	}
	return pf.Masked()
}

// Calico's CNI plugin stamps an allocation with Go's time.Time.String() of
// the UTC time ("2026-11-23 17:49:31.768271843 +0000 UTC"); Kubernetes
// times (releasedAt) are RFC 3339. Either reads.
const goTimeString = "2006-01-02 15:04:05.999999999 -0700 MST"

// stamp reads a time, a problem when it does not read.
func stamp(v any, where string, p *problems) time.Time {
	s, ok := v.(string)
	if !ok {
		p.add("%s is %s, not a time", where, what(v))
		return time.Time{}
	}
	// time.Time.String() appends the monotonic clock's reading when the
	// time has one.
	t := s
	if i := strings.Index(t, " m="); i >= 0 {
		t = t[:i]
	}
	for _, layout := range []string{goTimeString, time.RFC3339Nano} {
		if tm, err := time.Parse(layout, t); err == nil {
			return tm.UTC()
		}
	}
	p.add("%s %q is not a time", where, s)
	return time.Time{}
}

// maxExact is the largest integer a float64 holds exactly.
const maxExact = 1 << 53

// integer reads an integer as decoders leave it: int64 (the dynamic
// client's unstructured objects), json.Number (a decoder's UseNumber), or
// float64 (a plain decoder: exact only up to 2^53).
func integer(v any) (int64, error) {
	switch n := v.(type) {
	case int64:
		return n, nil
	case int:
		return int64(n), nil
	case int32:
		return int64(n), nil
	case uint64:
		if n > math.MaxInt64 {
			return 0, fmt.Errorf("is %d, out of range", n)
		}
		return int64(n), nil
	case json.Number:
		i, err := n.Int64()
		if err == nil {
			return i, nil
		}
		if f, err := n.Float64(); err == nil && f == math.Trunc(f) {
			return 0, fmt.Errorf("is %s, out of range", n)
		}
		return 0, fmt.Errorf("is %s, not an integer", n)
	case float64:
		if n != math.Trunc(n) {
			return 0, fmt.Errorf("is %v, not an integer", n)
		}
		if math.Abs(n) > maxExact {
			return 0, fmt.Errorf("is %v, read as a floating-point number beyond 2^53: its exact value is lost", n)
		}
		return int64(n), nil
	}
	return 0, fmt.Errorf("is %s, not an integer", what(v))
}

// unsigned reads a non-negative integer, up to 2^64-1 where the decoder
// kept it exact.
func unsigned(v any) (uint64, error) {
	switch n := v.(type) {
	case uint64:
		return n, nil
	case json.Number:
		if u, err := strconv.ParseUint(string(n), 10, 64); err == nil {
			return u, nil
		}
	}
	i, err := integer(v)
	if err != nil {
		return 0, err
	}
	if i < 0 {
		return 0, fmt.Errorf("is %d, negative", i)
	}
	return uint64(i), nil
}

// what names a value for problems: its JSON kind and, for scalars, its
// value.
func what(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		if len(v) > 40 {
			v = v[:40] + "…"
		}
		return fmt.Sprintf("the string %q", v)
	case bool:
		return fmt.Sprintf("the boolean %t", v)
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	case json.Number, int64, int, int32, uint64, float64:
		return fmt.Sprintf("the number %v", v)
	}
	return fmt.Sprintf("a %T", v)
}
