// Package example holds the worked examples of docs/development.md: a
// node ledger (cniresults) and a cluster-wide one (whereabouts), each
// with its snapshot type, its source and a rule, as the page walks
// through them. They compile and run in tests, and the page's code is
// checked against them, so the page cannot drift from the contracts. They
// are examples: ghostwatch does not ship their rules.
package example
