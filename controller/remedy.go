package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/sink"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/kube"
)

// Remedies returns the rules of rules whose remedy the controller can
// run: those that act on gossip members.
func Remedies(rules []rule.Rule) []rule.Rule {
	var out []rule.Rule
	for _, r := range rules {
		if rem := r.Info().Remedy; rem != nil && rem.Target == finding.MemberKind {
			out = append(out, r)
		}
	}
	return out
}

// EnableRemedies turns on the remedies ids names (gossip-force-leave is the
// controller's) under st. Call it before Run. Without it the controller
// acts on nothing.
func (c *Controller) EnableRemedies(ids []string, st remedy.Settings) error {
	if st.Now == nil {
		st.Now = c.cfg.Now
	}
	rems, err := remedy.Build(c.cfg.Rules, ids, st, &memberActuator{c: c})
	if err != nil {
		return err
	}
	for _, rem := range rems {
		for _, r := range c.cfg.Rules {
			if r.Info().ID == rem.Rule.ID {
				rem.Recheck = c.recheck(r)
			}
		}
	}
	c.remedies = rems
	return nil
}

// remedy runs every remedy on one pass's findings, and reports each
// action. It returns how long until the first finding waiting out its
// grace period is due, 0 when none is.
func (c *Controller) remedy(ctx context.Context, s *snapshot.Snapshot, fs []finding.Finding) time.Duration {
	var wait time.Duration
	for _, rem := range c.remedies {
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
	}
	return wait
}

// report logs one action, records its Event on the objects its finding
// concerns and, last, counts it in the metrics.
func (c *Controller) report(info rule.Info, act remedy.Action) {
	if act.Result != remedy.Pending {
		c.cfg.Log.Info("remedy", "remedy", act.Remedy, "result", act.Result, "target", act.Finding.Target.String(), "reason", act.Reason)
		(&sink.Events{Recorder: c.cfg.Events}).Action(info, act)
	}
	if m := c.cfg.Metrics; m != nil {
		m.Action(act)
	}
}

// leading returns what the leader watches, nil when this replica does not
// lead.
func (c *Controller) leading() *cluster {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cluster
}

// recheck is the re-check of a remedy of rule r: the pod cache must be
// current, the pods the rule names are read from the API server (quorum
// reads), and each gossip member's cluster is read again from its agent.
func (c *Controller) recheck(r rule.Rule) remedy.Recheck {
	rc, _ := r.(rule.Rechecker)
	return func(ctx context.Context, fs []finding.Finding) []error {
		fail := func(err error) []error {
			errs := make([]error, len(fs))
			for i := range errs {
				errs[i] = err
			}
			return errs
		}
		if rc == nil {
			return fail(errors.New("the rule cannot re-check its findings"))
		}
		cl := c.leading()
		if cl == nil {
			return fail(errors.New("this replica no longer leads"))
		}
		if err := cl.pods.Ready(c.cfg.Now()); err != nil {
			return fail(fmt.Errorf("the pod cache is not current: %w", err))
		}
		var q snapshot.Query
		for _, f := range fs {
			q.Add(rc.RecheckQuery(nil, f))
		}
		k, err := kube.Quorum(ctx, c.cfg.Client, q)
		if err != nil {
			return fail(err)
		}
		fresh := &snapshot.Snapshot{Taken: c.cfg.Now(), Kube: k}
		read := map[gossipKey]bool{}
		for _, f := range fs {
			t, ok := f.Target.(*finding.MemberTarget)
			if !ok {
				continue
			}
			key := gossipKey{system: t.System, cluster: t.Cluster}
			if read[key] {
				continue
			}
			read[key] = true
			v, _, err := cl.reader.readCluster(ctx, key, cl.gossipTargets()[key])
			if err != nil {
				// Recheck says the cluster was not read again.
				continue
			}
			if fresh.Gossip == nil {
				fresh.Gossip = &snapshot.Gossip{}
			}
			fresh.Gossip.Views = append(fresh.Gossip.Views, *v)
		}
		return rc.Recheck(fresh, fs)
	}
}

// memberActuator forces gossip members out of their cluster through the
// agent of one of its annotated pods.
type memberActuator struct{ c *Controller }

// Kind returns finding.MemberKind.
func (*memberActuator) Kind() string { return finding.MemberKind }

// Verify reads the member's cluster again: the member must be listed, gone,
// at the same address and port.
func (a *memberActuator) Verify(ctx context.Context, t finding.Target) error {
	mt, v, _, err := a.read(ctx, t)
	if err != nil {
		return err
	}
	for _, m := range v.Members {
		if m.Name != mt.Name {
			continue
		}
		switch {
		case !m.Gone():
			return fmt.Errorf("%s lists %s %s again", v.From, m.Name, m.Status)
		case m.Addr != mt.Addr || m.Port != mt.Port:
			return fmt.Errorf("%s lists %s at another address now", v.From, m.Name)
		}
		return nil
	}
	return fmt.Errorf("%w: %s no longer lists %s", remedy.ErrGone, v.From, mt.Name)
}

// Act forces the member out, with prune, through the agent that answered.
func (a *memberActuator) Act(ctx context.Context, t finding.Target) error {
	mt, _, agent, err := a.read(ctx, t)
	if err != nil {
		return err
	}
	fl, ok := agent.(forceLeaver)
	if !ok {
		return fmt.Errorf("%s has no force-leave", mt.System)
	}
	return fl.ForceLeave(ctx, mt.Name)
}

func (a *memberActuator) read(ctx context.Context, t finding.Target) (*finding.MemberTarget, *snapshot.GossipView, any, error) {
	mt, ok := t.(*finding.MemberTarget)
	if !ok {
		return nil, nil, nil, fmt.Errorf("not a gossip member: %v", t)
	}
	cl := a.c.leading()
	if cl == nil {
		return nil, nil, nil, errors.New("this replica no longer leads")
	}
	key := gossipKey{system: mt.System, cluster: mt.Cluster}
	v, agent, err := cl.reader.readCluster(ctx, key, cl.gossipTargets()[key])
	if err != nil {
		return nil, nil, nil, err
	}
	return mt, v, agent, nil
}
