// Package agent is the node agent's loop, and only wiring: it starts the
// live sources it is given (source.Live), audits the node whenever one of
// them says something changed and on a timer, hands the findings to the
// remedies that are turned on, and reports every audit and action as
// metrics and Kubernetes Events. It names no ledger and no rule: its
// sources come from the command that builds it, its rules and remedies
// from the registry. It never acts on a degraded view: a source that is
// not ready or fails means no action, grace periods that start over, a
// degraded status, and a metric that says why.
package agent
