package calico

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/pager"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
)

// DefaultTimeout bounds APISource.Collect when its Timeout is zero.
const DefaultTimeout = 30 * time.Second

// DefaultPageSize is APISource.PageSize when it is zero: a page of 500
// blocks of 64 addresses is a few megabytes.
const DefaultPageSize = 500

// Group is the API group of Calico's kubernetes datastore.
const Group = "crd.projectcalico.org"

// resource is one resource APISource lists.
type resource struct {
	plural, kind string
	// optional resources may be missing: a Calico without the
	// KubeControllersConfiguration kind leaves the collector's grace
	// unknown, not the ledger.
	optional bool
}

var resources = []resource{
	{"ipamblocks", KindIPAMBlock, false},
	{"ipamhandles", KindIPAMHandle, false},
	{"blockaffinities", KindBlockAffinity, false},
	{"ippools", KindIPPool, false},
	{"kubecontrollersconfigurations", KindKubeControllers, true},
}

// Listed names the resources APISource lists, as RBAC rules name them:
// the ClusterRole of anything that reads the ledger must grant list on
// each.
func Listed() []schema.GroupResource {
	var out []schema.GroupResource
	for _, r := range resources {
		out = append(out, schema.GroupResource{Group: Group, Resource: r.plural})
	}
	return out
}

// APISource reads the ledger from the API server, for a one-shot scan: one
// quorum list of each resource, page by page. It implements source.Source.
type APISource struct {
	// Client lists the objects.
	Client dynamic.Interface
	// Discovery, when set, is asked first whether the API server serves
	// Calico's resources at all: discovery is open to every user, so a
	// cluster without Calico reads as such even for a user who may not
	// list them. Without it, a 404 on the first list says the same.
	Discovery discovery.DiscoveryInterface
	// Timeout bounds the whole collection; zero means DefaultTimeout.
	Timeout time.Duration
	// PageSize is how many objects one list request asks for; zero means
	// DefaultPageSize.
	PageSize int64
}

// NewAPISource returns an APISource that talks to the API server cfg
// names.
func NewAPISource(cfg *rest.Config) (*APISource, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.UserAgent == "" {
		cfg.UserAgent = "ghostwatch"
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &APISource{Client: dyn, Discovery: disc}, nil
}

// Name returns "calico".
func (a *APISource) Name() string { return Name }

// notServed is why the ledger is unsupported when the API server serves
// none of it.
const notServed = "the API server serves no " + Group + "/v1 IPAM resources: Calico is not installed, or keeps its IPAM in etcd rather than in the kubernetes datastore"

// Collect lists the five resources and sets s.Calico. It returns
// source.ErrUnsupported when the API server does not serve Calico's
// resources, and an error naming the resource and the verb when one
// cannot be listed; it sets nothing unless every resource was listed.
func (a *APISource) Collect(ctx context.Context, s *snapshot.Snapshot) error {
	if a.Client == nil {
		return errors.New("no Kubernetes client")
	}
	timeout := a.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	served, err := a.served()
	if err != nil {
		return err
	}
	c := &snapshot.Calico{}
	for i, r := range resources {
		if served != nil && !served[r.plural] {
			if r.optional {
				continue
			}
			return incomplete(r)
		}
		err := a.list(ctx, r, c)
		switch {
		case err == nil:
		case apierrors.IsNotFound(err) && r.optional:
		case apierrors.IsNotFound(err) && i == 0:
			return source.Unsupported("%s", notServed)
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
			return fmt.Errorf("listing %s.%s: the API server did not answer within %s", r.plural, Group, timeout)
		default:
			return fmt.Errorf("listing %s.%s: %s", r.plural, Group, describe(err, r.plural))
		}
	}
	Sort(c)
	s.Calico = c
	return nil
}

func incomplete(r resource) error {
	return fmt.Errorf("the API server serves %s/v1 but not %s.%s: Calico's CRDs are incomplete", Group, r.plural, Group)
}

// Resource is one of the ledger's resources, to list and watch.
type Resource struct {
	schema.GroupVersionResource
	// Kind is the kind of its objects (KindIPAMBlock, ...).
	Kind string
}

// Served asks discovery (open to every user) which of the ledger's
// resources the API server serves, and returns those to read: every one,
// but an optional one it does not serve (the KubeControllersConfiguration
// kind, without which the collector's grace is Calico's default). It
// returns source.ErrUnsupported when the API server serves none of the
// ledger, and an error when it serves only part of it.
func Served(d discovery.DiscoveryInterface) ([]Resource, error) {
	served, err := servedBy(d)
	if err != nil {
		return nil, err
	}
	var out []Resource
	for _, r := range resources {
		if !served[r.plural] {
			if r.optional {
				continue
			}
			return nil, incomplete(r)
		}
		out = append(out, Resource{GroupVersionResource: schema.GroupVersionResource{Group: Group, Version: "v1", Resource: r.plural}, Kind: r.kind})
	}
	return out, nil
}

// served asks discovery which of Calico's resources the API server serves:
// nil when there is no discovery client, ErrUnsupported when it serves
// none of them.
func (a *APISource) served() (map[string]bool, error) {
	if a.Discovery == nil {
		return nil, nil
	}
	return servedBy(a.Discovery)
}

// servedBy is served, asking d.
func servedBy(d discovery.DiscoveryInterface) (map[string]bool, error) {
	l, err := d.ServerResourcesForGroupVersion(Group + "/v1")
	if apierrors.IsNotFound(err) {
		return nil, source.Unsupported("%s", notServed)
	}
	if err != nil {
		return nil, fmt.Errorf("asking the API server which %s/v1 resources it serves: %s", Group, describe(err, ""))
	}
	served := map[string]bool{}
	for _, r := range l.APIResources {
		if slices.Contains(r.Verbs, "list") {
			served[r.Name] = true
		}
	}
	if !served[resources[0].plural] {
		return nil, source.Unsupported("%s", notServed)
	}
	return served, nil
}

// list reads every object of r into c with quorum reads (no
// resourceVersion: as current as etcd), a page at a time; each object is
// converted as it comes, so memory follows a page, not the cluster. The
// pages follow one another at the first page's resourceVersion, a
// consistent view; when the continue token expires midway (etcd compacted
// past it), the list starts over once.
func (a *APISource) list(ctx context.Context, r resource, c *snapshot.Calico) error {
	gvr := schema.GroupVersionResource{Group: Group, Version: "v1", Resource: r.plural}
	p := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return a.Client.Resource(gvr).List(ctx, opts)
	})
	p.PageSize = a.PageSize
	if p.PageSize <= 0 {
		p.PageSize = DefaultPageSize
	}
	p.PageBufferSize = 1
	for attempt := 0; ; attempt++ {
		part := &snapshot.Calico{}
		err := p.EachListItem(ctx, metav1.ListOptions{}, func(obj runtime.Object) error {
			u, ok := obj.(*unstructured.Unstructured)
			if !ok {
				return fmt.Errorf("the API server returned a %T", obj)
			}
			// Items of a list may leave out their kind.
			if u.GetAPIVersion() == "" {
				u.SetAPIVersion(APIVersion)
			}
			if u.GetKind() == "" {
				u.SetKind(r.kind)
			}
			Add(part, u.Object)
			return nil
		})
		if apierrors.IsResourceExpired(err) && attempt == 0 {
			continue
		}
		if err != nil {
			return err
		}
		c.Blocks = append(c.Blocks, part.Blocks...)
		c.Handles = append(c.Handles, part.Handles...)
		c.Affinities = append(c.Affinities, part.Affinities...)
		c.Pools = append(c.Pools, part.Pools...)
		if part.LeakGC != nil {
			c.LeakGC = part.LeakGC
		}
		return nil
	}
}

// describe says what an error of the API server means, for resource
// (empty for discovery).
func describe(err error, plural string) string {
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		s := st.Status()
		switch {
		case s.Code == 401:
			return "Unauthorized (401): the API server rejected the credentials; the token or client certificate is missing, invalid or expired"
		case s.Code == 403 && plural != "":
			return fmt.Sprintf("%s (403 Forbidden): missing permission to list %s (API group %s) in the cluster; grant it with a ClusterRole rule with verb list",
				s.Message, plural, Group)
		case s.Message != "":
			return fmt.Sprintf("%s (%d %s)", s.Message, s.Code, s.Reason)
		}
		return fmt.Sprintf("%d %s", s.Code, s.Reason)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}
