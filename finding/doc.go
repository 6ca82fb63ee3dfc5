// Package finding defines what a rule reports: a Finding with its rule ID,
// severity, subject and evidence. It owns the vocabulary shared by rules,
// sinks and remedies, and nothing that reads or writes a ledger.
package finding
