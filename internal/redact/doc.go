// Package redact removes the credentials an address may carry from what
// ghostwatch prints: the user information of a URL the user gave (a
// Consul agent's, a Serf agent's RPC, a member list's, a controller
// replica's, the API server's in a kubeconfig), user name and password
// alike, for a token is often given as the user name. Addresses appear in
// reports, views, logs and errors, and in the errors of net/http, which
// quote the URL asked (a *url.Error keeps the user name; Go strips only
// the password). Every place that prints an address the user gave prints
// it through this package.
package redact
