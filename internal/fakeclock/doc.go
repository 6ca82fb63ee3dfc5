// Package fakeclock is a clock for tests that moves only when the test
// moves it, so that a grace period or a staleness limit passes however
// slow the machine. It only tells the time: it runs no timers and must not
// sleep, so code that waits on timers belongs in a testing/synctest bubble
// instead.
package fakeclock
