package conntrack

import "errors"

// Name is the source name recorded in snapshots.
const Name = "conntrack"

// ErrPermission is returned (wrapped) when the kernel refuses to show the
// table: reading conntrack needs CAP_NET_ADMIN.
var ErrPermission = errors.New("reading the conntrack table needs CAP_NET_ADMIN")
