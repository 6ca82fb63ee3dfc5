// Package cli holds the cobra commands of the ghostwatch binary: flag
// parsing, help text and exit codes. Commands build their inputs and call
// library packages (audit, agent, controller, sink) with IO writers, so
// tests run them with buffers. No rule or source logic lives here, and no
// lab code: the lab's commands are lab/labcmd, in the ghostwatch-lab binary.
package cli
