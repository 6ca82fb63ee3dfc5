// Package cli holds the cobra commands of the ghostwatch binary: flag
// parsing, help text and exit codes. Commands build their inputs and call
// library packages (audit, lab, sink) with IO writers, so tests run them
// with buffers. No rule or source logic lives here.
package cli
