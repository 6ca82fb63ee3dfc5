package netbed

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Service is one set of frontends translated to a set of backends, as
// kube-proxy programs a Service port.
type Service struct {
	Proto     snapshot.Proto
	Frontends []netip.AddrPort
	// Backends receive new connections at random. None: new connections
	// to the frontends are dropped.
	Backends []netip.AddrPort
}

// tableName is the node's nftables table; the lab owns it entirely.
const tableName = "ghostwatch-lab"

// SetServices atomically replaces the node's DNAT rules. Like kube-proxy,
// it only affects new connections: established flows keep the translation
// conntrack recorded for them.
func (n *Node) SetServices(svcs []Service) error {
	return n.do(func() error { return n.setServices(svcs) })
}

// setServices must run inside the node's namespace.
func (n *Node) setServices(svcs []Service) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables in %s: %w", n.name, err)
	}
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: tableName}
	// Add then delete the table, then build it anew, in one transaction.
	c.AddTable(t)
	c.DelTable(t)
	t = c.AddTable(t)
	pre := c.AddChain(&nftables.Chain{Name: "prerouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
	out := c.AddChain(&nftables.Chain{Name: "output", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest})
	// conntrack runs in a namespace only while some rule needs it. A node
	// running kube-proxy always has such rules; without this one a node
	// with no Service would stop tracking, and its existing flows would
	// lose their translations. The rule only reads the state.
	c.AddRule(&nftables.Rule{Table: t, Chain: pre, Exprs: []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
	}})
	for _, s := range svcs {
		for _, fe := range s.Frontends {
			for _, ch := range []*nftables.Chain{pre, out} {
				rules, err := dnatRules(s, fe)
				if err != nil {
					return err
				}
				for _, r := range rules {
					c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: r})
				}
			}
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("programming DNAT rules in %s: %w", n.name, err)
	}
	return nil
}

// dnatRules matches the frontend and picks a backend: rule i of N takes the
// connection with probability 1/(N-i), so each backend gets 1/N.
func dnatRules(s Service, fe netip.AddrPort) ([][]expr.Any, error) {
	match, family, err := matchFrontend(s.Proto, fe)
	if err != nil {
		return nil, err
	}
	var backends []netip.AddrPort
	for _, b := range s.Backends {
		if b.Addr().Is4() == fe.Addr().Is4() {
			backends = append(backends, b)
		}
	}
	if len(backends) == 0 {
		return [][]expr.Any{append(match, &expr.Verdict{Kind: expr.VerdictDrop})}, nil
	}
	var out [][]expr.Any
	for i, b := range backends {
		r := append([]expr.Any(nil), match...)
		if left := len(backends) - i; left > 1 {
			r = append(r,
				&expr.Numgen{Register: 1, Modulus: uint32(left), Type: unix.NFT_NG_RANDOM},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: u32(0)},
			)
		}
		r = append(r,
			&expr.Immediate{Register: 1, Data: b.Addr().AsSlice()},
			&expr.Immediate{Register: 2, Data: be16(b.Port())},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: family, RegAddrMin: 1, RegProtoMin: 2, Specified: true},
		)
		out = append(out, r)
	}
	return out, nil
}

func matchFrontend(p snapshot.Proto, fe netip.AddrPort) ([]expr.Any, uint32, error) {
	switch p {
	case snapshot.ProtoTCP, snapshot.ProtoUDP, snapshot.ProtoSCTP:
	default:
		return nil, 0, fmt.Errorf("protocol %s: the lab serves tcp, udp and sctp", p)
	}
	family, off := uint32(unix.NFPROTO_IPV4), uint32(16)
	if fe.Addr().Is6() {
		family, off = unix.NFPROTO_IPV6, 24
	}
	addr := fe.Addr().AsSlice()
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{byte(family)}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: uint32(len(addr))},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: addr},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{byte(p)}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: be16(fe.Port())},
	}, family, nil
}

func be16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }

func u32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }
