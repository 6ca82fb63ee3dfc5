// Package remedy removes ghosts that rules reported, under the safety
// invariants of the design: off unless asked for, dry-run available, only
// on complete evidence, only after the evidence has held for a grace period
// and survived a re-check just before acting, within a budget, and only
// the exact thing a finding named. It decides nothing on its own: every
// action starts from a Finding and is reported back as an Action.
package remedy
