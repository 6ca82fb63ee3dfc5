package snapshot

// tcpStates and sctpStates are the names `conntrack -L` prints for each
// state number the kernel reports (libnetfilter_conntrack's tables, after
// enum tcp_conntrack and enum sctp_conntrack); a number past the end is
// printed as NONE.
var (
	tcpStates = [...]string{
		"NONE", "SYN_SENT", "SYN_RECV", "ESTABLISHED", "FIN_WAIT",
		"CLOSE_WAIT", "LAST_ACK", "TIME_WAIT", "CLOSE", "SYN_SENT2",
	}
	sctpStates = [...]string{
		"NONE", "CLOSED", "COOKIE_WAIT", "COOKIE_ECHOED", "ESTABLISHED",
		"SHUTDOWN_SENT", "SHUTDOWN_RECD", "SHUTDOWN_ACK_SENT",
		"HEARTBEAT_SENT", "HEARTBEAT_ACKED",
	}
)

func statesOf(p Proto) []string {
	switch p {
	case ProtoTCP:
		return tcpStates[:]
	case ProtoSCTP:
		return sctpStates[:]
	}
	return nil
}

// States returns the state names of a protocol in the kernel's order (the
// name of state number n at index n): TCP's and SCTP's; nil for a protocol
// without states. The slice is the caller's.
func States(p Proto) []string {
	s := statesOf(p)
	if s == nil {
		return nil
	}
	return append([]string(nil), s...)
}

// StateNumber is the kernel's number for a TCP or SCTP state as a Flow
// names it; ok is false for another protocol or an unknown name.
func StateNumber(p Proto, name string) (n uint8, ok bool) {
	for i, s := range statesOf(p) {
		if s == name {
			return uint8(i), true
		}
	}
	return 0, false
}

// StateName is the inverse of StateNumber: the name of a TCP or SCTP state
// number, NONE for a number the table does not have (as `conntrack -L`
// prints it), "" for a protocol without states.
func StateName(p Proto, n uint8) string {
	s := statesOf(p)
	switch {
	case s == nil:
		return ""
	case int(n) < len(s):
		return s[n]
	}
	return s[0]
}
