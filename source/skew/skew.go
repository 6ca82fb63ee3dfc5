package skew

import (
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Defaults of Meter.
const (
	// clockWindow is how long an answer's measurement counts: the two
	// clocks drift apart (tens of parts per million) and may be stepped,
	// so old answers stop narrowing the offset.
	clockWindow = 10 * time.Minute
	// clockSamples bounds the answers kept within the window.
	clockSamples = 64
	// dateResolution is the Date header's: whole seconds, truncated.
	dateResolution = time.Second
)

// Meter measures a server's clock (the API server's, a gossip agent's)
// against this process's from the Date header of the server's answers
// (Wrap it around a client's transport, or Observe each answer). An answer whose Date reads D, to a request sent at t1 and
// answered at t2 by this process's clock, says the server's clock ran
// between D-t2 and D+1s-t1 ahead: the server stamped the answer between
// t1 and t2, and the header drops the fraction of a second. The offsets
// all answers of the last ten minutes allow are intersected; answers
// that contradict the others (a clock stepped) start the measurement
// over. Its zero value is ready to use; it is safe for concurrent use.
type Meter struct {
	// Name is whose clock it is ("the API server's"), as Clock names it.
	Name string
	// Now is this process's clock; nil means time.Now.
	Now func() time.Time

	mu      sync.Mutex
	samples []clockSample
}

// clockSample is one answer's measurement: the server's clock ran between
// lo and hi ahead of ours, read at our time at.
type clockSample struct {
	at     time.Time
	lo, hi time.Duration
}

func (c *Meter) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// Wrap returns rt measuring the clock of whoever answers through it.
func (c *Meter) Wrap(rt http.RoundTripper) http.RoundTripper {
	return clockTransport{clock: c, next: rt}
}

// WrapConfig makes cfg's transport measure the clock of the server cfg
// names.
func (c *Meter) WrapConfig(cfg *rest.Config) {
	cfg.Wrap(c.Wrap)
}

type clockTransport struct {
	clock *Meter
	next  http.RoundTripper
}

func (t clockTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	sent := t.clock.now()
	resp, err := t.next.RoundTrip(r)
	if err == nil {
		t.clock.Observe(sent, t.clock.now(), resp.Header.Get("Date"))
	}
	return resp, err
}

// Observe records one answer: sent and received on this process's clock,
// date its Date header. An answer without a Date that parses is ignored.
func (c *Meter) Observe(sent, received time.Time, date string) {
	d, err := http.ParseTime(date)
	if err != nil || received.Before(sent) {
		return
	}
	s := clockSample{at: received, lo: d.Sub(received), hi: d.Add(dateResolution).Sub(sent)}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expire(received)
	if lo, hi, ok := c.span(); ok && (s.hi < lo || s.lo > hi) {
		// Contradicts every answer before it: a clock was stepped.
		c.samples = c.samples[:0]
	}
	if len(c.samples) == clockSamples {
		c.samples = append(c.samples[:0], c.samples[1:]...)
	}
	c.samples = append(c.samples, s)
}

// expire forgets the answers older than the window at now.
func (c *Meter) expire(now time.Time) {
	i := 0
	for i < len(c.samples) && now.Sub(c.samples[i].at) > clockWindow {
		i++
	}
	if i > 0 {
		c.samples = append(c.samples[:0], c.samples[i:]...)
	}
}

// span is the offsets every answer kept allows.
func (c *Meter) span() (lo, hi time.Duration, ok bool) {
	if len(c.samples) == 0 {
		return 0, 0, false
	}
	lo, hi = c.samples[0].lo, c.samples[0].hi
	for _, s := range c.samples[1:] {
		lo, hi = max(lo, s.lo), min(hi, s.hi)
	}
	return lo, hi, lo <= hi
}

// Clock returns the server's clock as measured now: not measured when no
// answer came within the last ten minutes.
func (c *Meter) Clock() snapshot.Clock {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expire(c.now())
	clk := snapshot.Clock{Name: c.Name}
	lo, hi, ok := c.span()
	if !ok {
		return clk
	}
	clk.Measured = true
	clk.Offset = lo + (hi-lo)/2
	clk.Bound = (hi - lo) / 2
	clk.By = "the Date of its answers"
	return clk
}
