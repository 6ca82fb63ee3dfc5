// Package rule holds the rule catalog: pure functions from a Snapshot to
// Findings, one file per rule named by its ID, and the explicit registry of
// all of them. Rules never do I/O and never act.
package rule
