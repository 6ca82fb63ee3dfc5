// Package audit runs one full pass of the pipeline: it collects the sources
// into a Snapshot, evaluates the rules that have complete evidence, and
// returns a Report. The scan command, the lab and the agent's periodic audit
// all go through it. It takes no action.
package audit
