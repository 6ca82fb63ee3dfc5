package controller

import (
	"context"
	"errors"
	"time"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// remedy runs one remedy on a pass's findings, and reports each action.
// It returns how long until the first finding waiting out its grace
// period is due, 0 when none is.
func (c *Controller) remedy(ctx context.Context, rem *remedy.Remedy, s *snapshot.Snapshot, fs []finding.Finding) time.Duration {
	var wait time.Duration
	actions, err := rem.Apply(ctx, s, fs)
	var be *remedy.BudgetError
	switch {
	case errors.As(err, &be):
		c.cfg.Log.Warn("remedy budget exceeded: nothing acted on", "remedy", rem.ID(), "due", be.Due, "remaining", be.Remaining, "max", be.Max, "interval", be.Interval)
	case err != nil:
		c.cfg.Log.Warn("remedy refused", "remedy", rem.ID(), "err", err)
	}
	for _, act := range actions {
		c.report(rem.Rule, act)
		if act.Result == remedy.Pending {
			if w := max(act.Due.Sub(c.cfg.Now()), time.Millisecond); wait == 0 || w < wait {
				wait = w
			}
		}
	}
	return wait
}

// report logs one action, records its Event on the objects its finding
// concerns and, last, counts it in the metrics.
func (c *Controller) report(info rule.Info, act remedy.Action) {
	if act.Result != remedy.Pending {
		c.cfg.Log.Info("remedy", "remedy", act.Remedy, "result", act.Result, "target", act.Finding.Target.String(), "reason", act.Reason)
		c.events.Action(info, act)
	}
	if m := c.cfg.Metrics; m != nil {
		m.Action(act)
	}
}
