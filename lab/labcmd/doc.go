// Package labcmd holds the cobra commands of the ghostwatch-lab binary: the
// incidents the lab plays and its cleanup, their flags, help texts and exit
// codes. The production commands (cli) must never import it: it is what
// links the lab's namespaces, nftables and Serf agents into a binary.
package labcmd
