package saved

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/kube"
	"github.com/ghostwatch/ghostwatch/source/kubectl"
)

// SaveCommand is the kubectl command that saves every object a scan reads.
// Before Kubernetes 1.33, which serves no ServiceCIDRs, leave servicecidrs
// out and give the range with --service-cidr.
const SaveCommand = "kubectl get pods,services,endpointslices,nodes,servicecidrs -A -o yaml"

// savedKinds are the kinds the ledger reads from saved objects: v1 Pods,
// Services and Nodes, discovery.k8s.io/v1 EndpointSlices and
// networking.k8s.io/v1 ServiceCIDRs.
var savedKinds = []kubectl.Kind{
	{APIVersion: "v1", Kind: "Pod", Namespaced: true},
	{APIVersion: "v1", Kind: "Service", Namespaced: true},
	{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice", Namespaced: true},
	{APIVersion: "v1", Kind: "Node"},
	{APIVersion: "networking.k8s.io/v1", Kind: "ServiceCIDR"},
}

// keeper is what the saved objects are asked for their kinds:
// *kubectl.Files, or *kubectl.Objects.
type keeper interface {
	Keep(convert kubectl.Convert, kinds ...kubectl.Kind)
}

// keepSaved asks k for the ledger's kinds, each converted as the API
// source converts it.
func keepSaved(k keeper) { k.Keep(convertSaved, savedKinds...) }

// The values convertSaved keeps: each kind's snapshot type, and an
// EndpointSlice's endpoints.
type savedEndpoints []snapshot.Endpoint

func convertSaved(o *kubectl.Object) (any, error) {
	switch o.Kind {
	case "Pod":
		var p corev1.Pod
		if err := o.Decode(&p); err != nil {
			return nil, err
		}
		p.Namespace = o.Namespace
		return kube.Pod(&p), nil
	case "Service":
		var s corev1.Service
		if err := o.Decode(&s); err != nil {
			return nil, err
		}
		s.Namespace = o.Namespace
		return kube.Service(&s), nil
	case "EndpointSlice":
		var es discoveryv1.EndpointSlice
		if err := o.Decode(&es); err != nil {
			return nil, err
		}
		es.Namespace = o.Namespace
		return savedEndpoints(kube.Endpoints(&es)), nil
	case "Node":
		var n corev1.Node
		if err := o.Decode(&n); err != nil {
			return nil, err
		}
		return kube.Node(&n), nil
	case "ServiceCIDR":
		var c networkingv1.ServiceCIDR
		if err := o.Decode(&c); err != nil {
			return nil, err
		}
		return kube.ServiceCIDR(&c), nil
	}
	return nil, fmt.Errorf("%s is no kind of the kube ledger", o.Kind)
}

// savedLedger collects the ledger's objects among those kept, in the order
// they were read.
func savedLedger(objs *kubectl.Objects) snapshot.Kube {
	var k snapshot.Kube
	for _, v := range objs.Kept {
		switch v := v.(type) {
		case snapshot.Pod:
			k.Pods = append(k.Pods, v)
		case snapshot.Service:
			k.Services = append(k.Services, v)
		case savedEndpoints:
			k.Endpoints = append(k.Endpoints, v...)
		case snapshot.Node:
			k.Nodes = append(k.Nodes, v)
		case snapshot.ServiceCIDR:
			k.ServiceCIDRs = append(k.ServiceCIDRs, v)
		}
	}
	return k
}

// FileSource reads the cluster objects from files that kubectl wrote (see
// kubectl.Objects.Read) into one snapshot.Kube. Other ledgers may read
// objects of their own from the same files, read once for all.
type FileSource struct {
	files *kubectl.Files
	// kinds are the kinds the files must hold, from the rules that read
	// them (Narrow); nil means Pods, Services and EndpointSlices.
	kinds []string
	// Whole says the files are known to hold every namespace (a bundle
	// ghostwatch collect listed across all of them): the signs of a dump
	// saved with -n are not looked for.
	Whole bool
}

// NewFileSource returns the source of the objects in files, and asks files
// for the ledger's kinds: Pods, Services, EndpointSlices, Nodes and
// ServiceCIDRs.
func NewFileSource(files *kubectl.Files) *FileSource {
	keepSaved(files)
	return &FileSource{files: files}
}

// defaultKinds are the kinds a rule that says nothing reads.
var defaultKinds = []string{"Pod", "Service", "EndpointSlice"}

// Narrow records which kinds the rules that read the objects need
// (snapshot.KindReader; source.Narrower): the files must hold each.
func (f *FileSource) Narrow(readers []any) {
	need := map[string]bool{}
	for _, r := range readers {
		kinds := defaultKinds
		if kr, ok := r.(snapshot.KindReader); ok {
			kinds = kr.KubeKinds()
		}
		for _, k := range kinds {
			need[k] = true
		}
	}
	f.kinds = []string{}
	for k := range need {
		f.kinds = append(f.kinds, k)
	}
	// Pods, Services and EndpointSlices first, as kubectl is told to
	// save them; the others by name.
	rank := func(k string) int {
		if i := slices.Index(defaultKinds, k); i >= 0 {
			return i
		}
		return len(defaultKinds)
	}
	slices.SortFunc(f.kinds, func(a, b string) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(a, b))
	})
}

// Name returns "kube".
func (f *FileSource) Name() string { return kube.Name }

// Describe says how many objects of each kind were read.
func (f *FileSource) Describe(s *snapshot.Snapshot) string { return kube.Describe(s.Kube) }

// Collect reads every file into s.Kube. It fails, leaving s untouched, when
// a file cannot be read or parsed, or when the files together hold none of
// a kind the rules read (Pods, Services and EndpointSlices for the
// conntrack rules), or cannot be the whole cluster: judging flows against a
// partial cluster would report healthy flows as ghosts.
func (f *FileSource) Collect(ctx context.Context, s *snapshot.Snapshot) error {
	paths := f.files.Paths
	if len(paths) == 0 {
		return errors.New("no kube objects file given")
	}
	objs, err := f.files.Read(ctx)
	var pe *fs.PathError
	if errors.Is(err, fs.ErrNotExist) && errors.As(err, &pe) {
		return &missingFile{path: pe.Path, err: err}
	}
	if err != nil {
		return err
	}
	kinds := f.kinds
	if kinds == nil {
		kinds = defaultKinds
	}
	missing, err := complete(objs, paths, kinds)
	if err != nil {
		return err
	}
	k := savedLedger(objs)
	if !f.Whole {
		if err := whole(&k, paths, objs.Saw("Pod")); err != nil {
			return err
		}
	}
	if len(missing) > 0 {
		// The rules that read a kind the files lack are not judged; the
		// others are.
		k.Missing = missing
		k.SaveMissing = "kubectl get %s -A -o yaml > more.yaml, and pass that file too"
	}
	s.Kube = &k
	return nil
}

// missingFile is the error for an objects file that does not exist, with
// the command that writes one. It unwraps to the error of os.Open, and so
// to fs.ErrNotExist.
type missingFile struct {
	path string
	err  error
}

func (e *missingFile) Error() string {
	return "kube objects file " + e.path + " does not exist; save one with: " + SaveCommand + " > FILE"
}

func (e *missingFile) Unwrap() error { return e.err }

// whole fails when the objects cannot be the whole cluster, as a dump
// saved with -n instead of -A: an IP held by a pod of a namespace left out
// would read as held by no pod, and a real misdelivery would vanish. Two
// signs give it away: an EndpointSlice listing a pod of a namespace that
// has no Pod in the files, and every object in a single namespace (a
// cluster always runs pods in kube-system).
func whole(k *snapshot.Kube, paths []string, pods bool) error {
	if !pods {
		// No Pod saved at all: the rules that read Pods are not judged,
		// and no pod can read as missing.
		return nil
	}
	podNS := map[string]bool{}
	for _, p := range k.Pods {
		podNS[p.Namespace] = true
	}
	why := ""
	for _, e := range k.Endpoints {
		if e.Pod != nil && !podNS[e.Pod.Namespace] {
			why = fmt.Sprintf("an EndpointSlice of %s lists pod %s, yet they hold no Pod of namespace %s", e.Service, e.Pod, e.Pod.Namespace)
			break
		}
	}
	if why == "" {
		nss := map[string]bool{}
		for ns := range podNS {
			nss[ns] = true
		}
		for _, s := range k.Services {
			nss[s.Namespace] = true
		}
		if len(nss) == 1 {
			for ns := range nss {
				why = fmt.Sprintf("every Pod and Service in them is in namespace %s", ns)
			}
		}
	}
	if why == "" {
		return nil
	}
	return fmt.Errorf("%s cannot be the whole cluster: %s. Saved with -n instead of -A, they leave out the pods of other namespaces, and an IP one of them holds would read as held by no pod; save them with: %s",
		strings.Join(paths, ", "), why, SaveCommand)
}

// complete returns the kinds of kinds the objects do not include, and
// fails when they include none of them: nothing the rules read was saved.
func complete(objs *kubectl.Objects, paths []string, kinds []string) ([]string, error) {
	var missing []string
	for _, kind := range kinds {
		if !objs.Saw(kind) {
			missing = append(missing, kind)
		}
	}
	if len(missing) < len(kinds) || len(kinds) == 0 {
		return missing, nil
	}
	msg := fmt.Sprintf("%s: no %s found", strings.Join(paths, ", "), strings.Join(missing, ", no "))
	if len(objs.Ignored) > 0 {
		var ig []string
		for k, n := range objs.Ignored {
			ig = append(ig, fmt.Sprintf("%d %s", n, k))
		}
		sort.Strings(ig)
		msg += " (ignored: " + strings.Join(ig, ", ") + ")"
	}
	return nil, errors.New(msg + "; save them all with: " + SaveCommand)
}
