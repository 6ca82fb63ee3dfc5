// Package skew measures how far another party's clock (the API server's,
// a gossip agent's) runs from this process's, from the Date of its
// answers, so that a proof comparing a time read on that clock with one
// read on another allows for what was measured, and no more.
//
// It measures; it judges nothing, and it sends nothing of its own.
package skew
