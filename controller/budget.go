package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// BudgetAnnotationPrefix starts the annotation of the budget Lease that
// holds one remedy's spending: ghostwatch.io/budget.<remedy>.
const BudgetAnnotationPrefix = "ghostwatch.io/budget."

// MaxBudget is the most a cluster-wide budget may allow per interval: its
// spending is kept in one annotation of the budget Lease, about 36 bytes
// an action, well within the 256 KiB an object's annotations may hold.
const MaxBudget = 5000

// LeaseBudget keeps the remedies' budgets on a Lease of their own, beside
// the leader's (remedy.BudgetStore): every replica reads it before acting
// and writes it, at the version it read, for every ghost IP acted on, so
// that neither a failover nor a restart hands out a fresh budget. A quorum
// read of the API server, never a cache.
//
// The replicas' clocks may disagree, so the times are kept on the API
// server's clock, measured from its answers (APIClock): each is written
// as the latest it may have been there, and read back as the latest it may
// have been here. A spending is so counted at least as long as the window
// lasts, whatever the skew; with no measurement the budget is neither
// read nor written, and nothing is acted on.
type LeaseBudget struct {
	Client kubernetes.Interface
	// Namespace and Name name the Lease (created when missing).
	Namespace, Name string
	// APIClock is the API server's clock as measured now.
	APIClock func() snapshot.Clock
}

var _ remedy.BudgetStore = (*LeaseBudget)(nil)

func (l *LeaseBudget) clock() (snapshot.Clock, error) {
	var c snapshot.Clock
	if l.APIClock != nil {
		c = l.APIClock()
	}
	if !c.Measured {
		return c, fmt.Errorf("the API server's clock is not measured (no answer from it lately): the budget's times, kept on it, cannot be read or written")
	}
	return c, nil
}

func (l *LeaseBudget) ref() string { return "Lease " + l.Namespace + "/" + l.Name }

// Spent reads the Lease and returns key's times on this process's clock.
func (l *LeaseBudget) Spent(ctx context.Context, key string) ([]time.Time, string, error) {
	c, err := l.clock()
	if err != nil {
		return nil, "", err
	}
	lease, err := l.Client.CoordinationV1().Leases(l.Namespace).Get(ctx, l.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("reading %s: %w", l.ref(), err)
	}
	var out []time.Time
	for _, f := range strings.Fields(lease.Annotations[BudgetAnnotationPrefix+key]) {
		t, err := time.Parse(time.RFC3339Nano, f)
		if err != nil {
			return nil, "", fmt.Errorf("%s: annotation %s%s: %q is not a time: %w", l.ref(), BudgetAnnotationPrefix, key, f, err)
		}
		// The latest it may have been on our clock.
		out = append(out, t.Add(-c.Offset).Add(c.Bound))
	}
	return out, versionOf(lease), nil
}

// versionOf is the version a Lease read is written back at: its
// resourceVersion, or a word for one without (a fake API server's).
func versionOf(l *coordinationv1.Lease) string {
	if l.ResourceVersion == "" {
		return "unversioned"
	}
	return l.ResourceVersion
}

// Spend writes key's times, provided the Lease is still at version ("" for
// a Lease that did not exist).
func (l *LeaseBudget) Spend(ctx context.Context, key string, spent []time.Time, version string) error {
	c, err := l.clock()
	if err != nil {
		return err
	}
	if len(spent) > MaxBudget {
		return fmt.Errorf("%d actions to keep in %s, more than %d", len(spent), l.ref(), MaxBudget)
	}
	times := make([]string, len(spent))
	for i, t := range spent {
		// The latest it may have been on the API server's clock.
		times[i] = t.Add(c.Offset).Add(c.Bound).UTC().Format(time.RFC3339Nano)
	}
	value := strings.Join(times, " ")
	leases := l.Client.CoordinationV1().Leases(l.Namespace)
	if version == "" {
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: l.Namespace, Name: l.Name,
			Labels:      map[string]string{"app.kubernetes.io/name": "ghostwatch", "app.kubernetes.io/component": "controller"},
			Annotations: map[string]string{BudgetAnnotationPrefix + key: value}}}
		_, err := leases.Create(ctx, lease, metav1.CreateOptions{})
		switch {
		case apierrors.IsAlreadyExists(err):
			return fmt.Errorf("%s: created meanwhile: %w", l.ref(), remedy.ErrBudgetChanged)
		case err != nil:
			return fmt.Errorf("creating %s: %w", l.ref(), err)
		}
		return nil
	}
	lease, err := leases.Get(ctx, l.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s: deleted meanwhile: %w", l.ref(), remedy.ErrBudgetChanged)
	case err != nil:
		return fmt.Errorf("reading %s: %w", l.ref(), err)
	case versionOf(lease) != version:
		return fmt.Errorf("%s: at version %s, not %s: %w", l.ref(), versionOf(lease), version, remedy.ErrBudgetChanged)
	}
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Annotations[BudgetAnnotationPrefix+key] = value
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	switch {
	case apierrors.IsConflict(err):
		return fmt.Errorf("%s: %w", l.ref(), errors.Join(remedy.ErrBudgetChanged, err))
	case err != nil:
		return fmt.Errorf("writing %s: %w", l.ref(), err)
	}
	return nil
}
