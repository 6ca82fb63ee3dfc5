// Package agent is the node agent's loop: it keeps the cluster in informer
// caches, audits this node whenever the cluster changes and on a timer,
// hands the findings to the remedies that are turned on, and reports every
// audit and action as metrics and Kubernetes Events. It names no rule: its
// rules and remedies come from the registry. It never acts on a degraded
// view: a stale cache or a failed dump means no action, grace periods that
// start over, a degraded status, and a metric that says why.
package agent
