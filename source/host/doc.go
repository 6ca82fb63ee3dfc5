// Package host reads what the node itself holds that the rules need beside
// its tables: the addresses of the network namespace whose conntrack table
// is read. kube-proxy, without --nodeport-addresses, accepts NodePorts on
// every one of them, so each is a NodePort frontend. They are read at every
// collection: an address added to the node later (a second NIC, a
// keepalived VIP) is a frontend from the next audit on.
package host
