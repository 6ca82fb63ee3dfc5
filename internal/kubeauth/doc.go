// Package kubeauth admits a request to what an agent serves of its node
// (the flows its conntrack table holds for an address, host-local's
// reservations, its findings) only for a caller the cluster authorizes,
// as kube-rbac-proxy does: the request's bearer token checked with a
// TokenReview, bound to the audience Audience, and the identity it names
// checked with a SubjectAccessReview for get on the node's subresource in
// group Group (nodes/flows, nodes/hostlocal, nodes/findings). Decisions
// are cached briefly, in bounded caches; at most MaxInFlight requests are
// answered at once, the rest refused with 429. It never serves what it
// guards without both reviews allowing it, and never logs a token.
//
// The node is not a trusted place: any local user can reach a loopback
// port of a hostNetwork pod. The audience keeps the token a caller sends
// useless against the API server, should the port be held by another
// process than the agent when the caller asks.
package kubeauth
