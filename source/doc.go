// Package source defines the Source interface and the framework that runs
// sources into a Snapshot, recording each one's status and duration so that
// individual sources do not. Sources read one ledger each and never judge.
package source
