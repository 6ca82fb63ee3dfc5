// Package poll waits in a test until a condition holds, checking it again
// and again and failing the test with what it waited for once a deadline
// passes. It is for tests only, and for conditions nothing announces: it
// must not stand in for a channel, a sync.Cond or a testing/synctest
// bubble that can say when a thing happened.
package poll
