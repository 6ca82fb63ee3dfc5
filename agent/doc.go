// Package agent is the node agent's loop: it keeps the cluster in informer
// caches, audits this node whenever a Pod or EndpointSlice changes and on a
// timer, hands stale-nat-flow findings to the remedy when one is enabled,
// and reports every audit and action as metrics and Kubernetes Events. It
// never acts on a degraded view: a stale cache or a failed dump means no
// deletes, a degraded status, and a metric that says why.
package agent
