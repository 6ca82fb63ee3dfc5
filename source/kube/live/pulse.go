package live

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/ghostwatch/ghostwatch/source/kube"
)

// DefaultPulse is Pulse.Interval when it is zero.
const DefaultPulse = 5 * time.Second

// Pulse tells a hung API server from a quiet cluster. A server that stops
// answering without closing its connections (its process stopped, a
// network that drops packets) leaves every watch open and silent, and an
// informer's cache then looks current for as long as its silence allows
// (minutes). When no watch has heard from the server within Interval,
// Pulse asks it GET /readyz (answered to every client, and exempt from
// the server's priority and fairness queues), giving it Interval to
// answer; Ready fails once the server has been heard from neither way for
// twice Interval. A busy cluster's watches answer for it: the pulse asks
// only when they are silent.
type Pulse struct {
	// Client is asked; Heard, when set, says when a watch last heard
	// from the server (zero when never).
	Client kubernetes.Interface
	Heard  func() time.Time
	// Interval is how often the server must be heard from; DefaultPulse
	// when zero.
	Interval time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	mu sync.Mutex
	// answered is when the server last answered a pulse; err why the
	// last pulse failed (nil once one answers).
	answered time.Time
	err      error
	started  time.Time
	notify   []func()
}

func (p *Pulse) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

func (p *Pulse) interval() time.Duration {
	if p.Interval > 0 {
		return p.Interval
	}
	return DefaultPulse
}

// OnChange calls fn when the server stops or starts answering again.
func (p *Pulse) OnChange(fn func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.notify = append(p.notify, fn)
}

// Start asks the server as needed until ctx ends; it does not block.
func (p *Pulse) Start(ctx context.Context) {
	p.mu.Lock()
	p.started, p.answered, p.err = p.now(), time.Time{}, nil
	p.mu.Unlock()
	go p.run(ctx)
}

func (p *Pulse) run(ctx context.Context) {
	t := time.NewTicker(p.interval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if h := p.heard(); !h.IsZero() && p.now().Sub(h) < p.interval() {
			continue
		}
		p.ask(ctx)
	}
}

// ask asks the server once, within the interval, and records the answer.
func (p *Pulse) ask(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, p.interval())
	defer cancel()
	err := p.probe(ctx)
	if ctx.Err() != nil && err == nil {
		err = ctx.Err()
	}
	p.mu.Lock()
	was := p.err
	if err == nil {
		p.answered, p.err = p.now(), nil
	} else if ctx.Err() == nil || p.err == nil || err.Error() != p.err.Error() {
		p.err = err
	}
	fns := p.notify
	p.mu.Unlock()
	if (was == nil) != (err == nil) {
		for _, fn := range fns {
			fn()
		}
	}
}

// probe asks GET /readyz, giving up when ctx ends even if the client
// does not (a fake client takes no context).
func (p *Pulse) probe(ctx context.Context) error {
	done := make(chan error, 1)
	go func() {
		rc := p.Client.Discovery().RESTClient()
		if isNilClient(rc) {
			_, err := p.Client.Discovery().ServerVersion()
			done <- err
			return
		}
		done <- rc.Get().AbsPath("/readyz").Do(ctx).Error()
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("no answer within %s", p.interval())
	}
}

// heard is when a watch last heard from the server, zero when unknown.
func (p *Pulse) heard() time.Time {
	if p.Heard == nil {
		return time.Time{}
	}
	return p.Heard()
}

// Ready returns nil while the server has been heard from (a watch's event
// or bookmark, or an answer to a pulse) within twice the interval, or the
// pulse has not run that long yet; otherwise how long it has been silent,
// and why.
func (p *Pulse) Ready(now time.Time) error {
	p.mu.Lock()
	answered, err, started := p.answered, p.err, p.started
	p.mu.Unlock()
	if started.IsZero() || err == nil {
		return nil
	}
	last := answered
	if h := p.heard(); h.After(last) {
		last = h
	}
	if last.IsZero() || last.Before(started) {
		last = started
	}
	silent := now.Sub(last)
	if silent < 2*p.interval() {
		return nil
	}
	return fmt.Errorf("the API server has not answered for %s (GET /readyz: %s): its watches may be open and silent, so the caches are not trusted", silent.Round(time.Second), kube.DescribeError(err, ""))
}

// isNilClient reports whether a REST client is nil, or a nil pointer (a
// fake clientset's).
func isNilClient(rc any) bool {
	if rc == nil {
		return true
	}
	v := reflect.ValueOf(rc)
	return v.Kind() == reflect.Pointer && v.IsNil()
}
