// Package apicost measures what a node's API clients cost the API server:
// ghostwatch's agent beside a real kube-proxy on one node of a real control
// plane (lab/controlplane) that holds many pods, Nodes and Services. Each
// client reaches the API server through a Tap of its own in the node's
// namespace, which counts the bytes it sends and receives on the TCP
// connections and decodes the answers to count the objects in them; the API
// server's audit log counts the requests. It is a measuring instrument of
// the lab: the ghostwatch binary must not import it.
package apicost
