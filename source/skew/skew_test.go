package skew

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/internal/fakeclock"
)

// An answer's Date, the time the request was sent and the time it was
// answered bound the server's clock; answers at other fractions of a
// second narrow it, answers that contradict start over, and none for ten
// minutes leaves it unmeasured.
func TestMeterFromDates(t *testing.T) {
	base := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	clk := fakeclock.New(base)
	c := &Meter{Name: "the API server's", Now: clk.Now}
	if got := c.Clock(); got.Measured {
		t.Fatalf("no answer yet: %v", got)
	}
	// The server runs 2 min 0.3 s ahead; each answer takes 20 ms.
	ahead := 2*time.Minute + 300*time.Millisecond
	answer := func(at time.Time) {
		date := at.Add(10 * time.Millisecond).Add(ahead).UTC().Format(http.TimeFormat)
		c.Observe(at, at.Add(20*time.Millisecond), date)
	}
	answer(base)
	got := c.Clock()
	if !got.Measured || got.Offset-got.Bound > ahead || got.Offset+got.Bound < ahead || got.Bound > 600*time.Millisecond {
		t.Fatalf("one answer: %v; want %s within it, give or take at most a second's half and the round trip", got, ahead)
	}
	for i := range 20 {
		answer(base.Add(time.Duration(i) * 1130 * time.Millisecond))
	}
	got = c.Clock()
	if got.Offset-got.Bound > ahead || got.Offset+got.Bound < ahead || got.Bound > 50*time.Millisecond {
		t.Fatalf("twenty answers: %v; want %s within it, narrowed to tens of ms", got, ahead)
	}
	// The server's clock is stepped back by an hour: the old answers no
	// longer count.
	ahead -= time.Hour
	answer(base.Add(30 * time.Second))
	got = c.Clock()
	if got.Offset-got.Bound > ahead || got.Offset+got.Bound < ahead {
		t.Fatalf("after a step: %v; want %s within it", got, ahead)
	}
	clk.Set(base.Add(41 * time.Minute))
	if got := c.Clock(); got.Measured {
		t.Errorf("ten minutes without an answer: %v; want not measured", got)
	}
	// A Date that does not parse, or an answer before its request, is
	// no measurement.
	c.Observe(clk.Now(), clk.Now(), "yesterday")
	c.Observe(clk.Now(), clk.Now().Add(-time.Second), clk.Now().Format(http.TimeFormat))
	if got := c.Clock(); got.Measured {
		t.Errorf("after unusable answers: %v", got)
	}
}

// Wrapped around a client's transport, it measures whoever answers.
func TestMeterWrapsATransport(t *testing.T) {
	ahead := 2 * time.Minute
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", time.Now().Add(ahead).UTC().Format(http.TimeFormat))
	}))
	defer srv.Close()
	c := &Meter{}
	client := &http.Client{Transport: c.Wrap(http.DefaultTransport)}
	for range 3 {
		resp, err := client.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	got := c.Clock()
	if !got.Measured || got.Offset-got.Bound > ahead || got.Offset+got.Bound < ahead {
		t.Errorf("%v; want %s within it", got, ahead)
	}
}
