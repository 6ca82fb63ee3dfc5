package conntrack

import (
	"encoding/binary"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// The wire format, from the kernel UAPI headers linux/netlink.h,
// linux/netfilter/nfnetlink.h and linux/netfilter/nfnetlink_conntrack.h
// (the names of the TCP and SCTP state numbers, after
// linux/netfilter/nf_conntrack_{tcp,sctp}.h, are in snapshot). They are
// spelled out here rather than taken from x/sys/unix so that the parser
// builds, and can be fuzzed, on every platform.
const (
	nlmsgHdrLen = 16 // struct nlmsghdr
	nlaHdrLen   = 4  // struct nlattr
	nfgenLen    = 4  // struct nfgenmsg

	nlmsgNoop    = 0x1
	nlmsgError   = 0x2
	nlmsgDone    = 0x3
	nlmsgOverrun = 0x4

	nlmFRequest  = 0x1
	nlmFMulti    = 0x2
	nlmFAck      = 0x4
	nlmFDumpIntr = 0x10
	nlmFDump     = 0x300 // NLM_F_ROOT|NLM_F_MATCH
	nlmFExcl     = 0x200
	nlmFCreate   = 0x400

	// Flags of an NLMSG_ERROR message.
	nlmFCapped  = 0x100 // the request is not echoed
	nlmFAckTLVs = 0x200 // extended ack attributes follow

	nlmsgerrAttrMsg = 1 // NLMSGERR_ATTR_MSG: a NUL-terminated string

	nlaFNested  = 0x8000
	nlaTypeMask = 0x3fff

	afUnspec = 0
	afInet   = 2
	afInet6  = 10

	nfnetlinkV0 = 0

	nfnlSubsysCTNetlink = 1

	ctMsgNew    = 0
	ctMsgGet    = 1
	ctMsgDelete = 2

	ctMsgTypeNew    = nfnlSubsysCTNetlink<<8 | ctMsgNew
	ctMsgTypeGet    = nfnlSubsysCTNetlink<<8 | ctMsgGet
	ctMsgTypeDelete = nfnlSubsysCTNetlink<<8 | ctMsgDelete

	// enum ctattr_type
	ctaTupleOrig  = 1
	ctaTupleReply = 2
	ctaStatus     = 3
	ctaProtoinfo  = 4
	ctaTimeout    = 7
	ctaMark       = 8
	ctaID         = 12
	ctaZone       = 18
	ctaTimestamp  = 20

	// enum ctattr_tuple
	ctaTupleIP    = 1
	ctaTupleProto = 2

	// enum ctattr_ip
	ctaIPv4Src = 1
	ctaIPv4Dst = 2
	ctaIPv6Src = 3
	ctaIPv6Dst = 4

	// enum ctattr_l4proto
	ctaProtoNum     = 1
	ctaProtoSrcPort = 2
	ctaProtoDstPort = 3

	// enum ctattr_protoinfo
	ctaProtoinfoTCP  = 1
	ctaProtoinfoSCTP = 3

	// enum ctattr_protoinfo_tcp
	ctaProtoinfoTCPState = 1

	// enum ctattr_protoinfo_sctp
	ctaProtoinfoSCTPState     = 1
	ctaProtoinfoSCTPVtagOrig  = 2
	ctaProtoinfoSCTPVtagReply = 3

	// enum ctattr_tstamp
	ctaTimestampStart = 1

	// IPS_DYING, and the status bits the kernel refuses to see changed
	// (include/uapi/linux/netfilter/nf_conntrack_common.h).
	statusDying      uint32 = 1 << 9
	statusUnsettable        = snapshot.StatusExpected | snapshot.StatusConfirmed | statusDying
)

var native = binary.NativeEndian

func align4(n int) int { return (n + 3) &^ 3 }
