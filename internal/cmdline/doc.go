// Package cmdline holds what the command lines of the ghostwatch binaries
// share: exit codes, how an error ends the process, signal handling, the -o
// output names, the refusal of negative durations and the version line. It
// holds no command and imports no ghostwatch package but buildinfo, redact
// and text, so that the production binary (cli) and the lab's (lab/labcmd)
// build on it without either reaching the other.
package cmdline
