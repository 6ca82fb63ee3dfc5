package kube

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/calico"
)

// SaveCommand is the kubectl command that saves every object a scan reads.
// Before Kubernetes 1.33, which serves no ServiceCIDRs, leave servicecidrs
// out and give the range with --service-cidr.
const SaveCommand = "kubectl get pods,services,endpointslices,nodes,servicecidrs -A -o yaml"

// Objects holds the cluster objects read from kubectl output, already
// converted. Read several files into one Objects to merge them.
type Objects struct {
	// Kube holds the Pods, Services, EndpointSlices and Nodes, in the order
	// the input listed them.
	Kube snapshot.Kube
	// Calico holds Calico's IPAM objects (source/calico converts them), in
	// the order the input listed them.
	Calico snapshot.Calico
	// Ignored counts the objects of other kinds, by "apiVersion Kind"
	// ("apps/v1 Deployment").
	Ignored map[string]int

	// seen remembers where each object was read, to tell a repeat of the
	// same object (skipped) from two different versions of it (an error).
	seen map[objectKey]objectOrigin
	// added lists the keys of seen in the order they were added, to roll
	// back to a checkpoint.
	added []objectKey
}

// checkpoint is the state of Objects at one moment.
type checkpoint struct {
	pods, services, endpoints, nodes, cidrs, added int
	blocks, handles, affinities, pools             int
	leakGC                                         *snapshot.LeakGC
	ignored                                        map[string]int
}

func (o *Objects) checkpoint() checkpoint {
	c := checkpoint{
		pods: len(o.Kube.Pods), services: len(o.Kube.Services),
		endpoints: len(o.Kube.Endpoints), nodes: len(o.Kube.Nodes), cidrs: len(o.Kube.ServiceCIDRs),
		blocks: len(o.Calico.Blocks), handles: len(o.Calico.Handles),
		affinities: len(o.Calico.Affinities), pools: len(o.Calico.Pools), leakGC: o.Calico.LeakGC,
		added: len(o.added), ignored: make(map[string]int, len(o.Ignored)),
	}
	for k, n := range o.Ignored {
		c.ignored[k] = n
	}
	return c
}

// rollback forgets what was added since c was taken.
func (o *Objects) rollback(c checkpoint) {
	o.Kube.Pods = o.Kube.Pods[:c.pods]
	o.Kube.Services = o.Kube.Services[:c.services]
	o.Kube.Endpoints = o.Kube.Endpoints[:c.endpoints]
	o.Kube.Nodes = o.Kube.Nodes[:c.nodes]
	o.Kube.ServiceCIDRs = o.Kube.ServiceCIDRs[:c.cidrs]
	o.Calico.Blocks = o.Calico.Blocks[:c.blocks]
	o.Calico.Handles = o.Calico.Handles[:c.handles]
	o.Calico.Affinities = o.Calico.Affinities[:c.affinities]
	o.Calico.Pools = o.Calico.Pools[:c.pools]
	o.Calico.LeakGC = c.leakGC
	for _, k := range o.added[c.added:] {
		delete(o.seen, k)
	}
	o.added = o.added[:c.added]
	o.Ignored = c.ignored
}

type objectKey struct {
	kind, namespace, name string
}

type objectOrigin struct {
	where   string // name:line
	uid, rv string
}

// ReadObjects reads the objects in what `kubectl get pods,services,
// endpointslices,nodes -A -o yaml` (or -o json) prints; see Objects.Read.
func ReadObjects(name string, r io.Reader) (*Objects, error) {
	o := &Objects{}
	if err := o.Read(name, r); err != nil {
		return nil, err
	}
	return o, nil
}

// Read adds the objects in r, which it calls name in errors, to o. It reads
// YAML (a stream of documents separated by ---) or JSON (one or more
// values); each document or value is an object or a list of objects (kind
// List, or PodList, ServiceList, ...: items of a typed list may leave out
// apiVersion and kind). v1 Pods, Services and Nodes, discovery.k8s.io/v1
// EndpointSlices and networking.k8s.io/v1 ServiceCIDRs are kept, and so
// are Calico's IPAM objects (crd.projectcalico.org/v1 or
// projectcalico.org/v3 IPAMBlocks, IPAMHandles, BlockAffinities, IPPools
// and the KubeControllersConfiguration "default"); objects of other kinds
// are counted in Ignored.
// The items of a list are read one at a time, so a list as large as a big
// cluster's reads in the memory its largest item takes, plus what is kept.
// YAML reads as Kubernetes reads it (sigs.k8s.io/yaml, YAML 1.1): unquoted
// y, n, yes, no, on and off are booleans, merge keys (<<) are expanded and a
// key given twice is an error.
//
// Every error starts with "name:line: ": the line of a syntax error as the
// YAML or JSON decoder names it, or else the line where the offending
// object starts (in JSON, where the offending field's value starts), the
// object being named after its kind, namespace and name. An object without
// a kind, a field of the wrong type, a kept object without a name or an
// object that appears twice with different contents (two different
// resourceVersions) is an error; fields these API types do not know are
// ignored, so output from newer clusters still reads. An object repeated
// exactly (same uid and resourceVersion) is kept once. What a Calico
// object holds that cannot be read is no error: source/calico lists it in
// the object's Malformed. On error, o holds what was read before it.
func (o *Objects) Read(name string, r io.Reader) error {
	if o.Ignored == nil {
		o.Ignored = map[string]int{}
	}
	if o.seen == nil {
		o.seen = map[objectKey]objectOrigin{}
	}
	rd := &fileReader{name: name, objs: o}
	err := rd.read(r)
	if err != nil {
		var le *lineError
		if errors.As(err, &le) {
			return fmt.Errorf("%s:%d: %w", name, max(le.line, 1), le.err)
		}
		return fmt.Errorf("%s:%d: %w", name, max(rd.line, 1), err)
	}
	return nil
}

// add decodes a kept kind into o, or counts an ignored one.
func (o *Objects) add(name string, obj object, h *header) error {
	what := h.Kind
	if h.Metadata.Name != "" {
		what += " " + snapshot.ObjectRef{Namespace: h.Metadata.Namespace, Name: h.Metadata.Name}.String()
	}
	decode := func(v any) error {
		if err := json.Unmarshal(obj.raw, v); err != nil {
			return decodeError(obj, what, err)
		}
		return nil
	}
	gvk := h.APIVersion + " " + h.Kind
	switch gvk {
	case "v1 Pod":
		var p corev1.Pod
		if err := decode(&p); err != nil {
			return err
		}
		defaultNamespace(&p.Namespace)
		if skip, err := o.remember(name, obj, h.Kind, p.Namespace, p.Name, string(p.UID), p.ResourceVersion); skip || err != nil {
			return err
		}
		o.Kube.Pods = append(o.Kube.Pods, Pod(&p))
	case "v1 Service":
		var s corev1.Service
		if err := decode(&s); err != nil {
			return err
		}
		defaultNamespace(&s.Namespace)
		if skip, err := o.remember(name, obj, h.Kind, s.Namespace, s.Name, string(s.UID), s.ResourceVersion); skip || err != nil {
			return err
		}
		o.Kube.Services = append(o.Kube.Services, Service(&s))
	case "discovery.k8s.io/v1 EndpointSlice":
		var es discoveryv1.EndpointSlice
		if err := decode(&es); err != nil {
			return err
		}
		defaultNamespace(&es.Namespace)
		if skip, err := o.remember(name, obj, h.Kind, es.Namespace, es.Name, string(es.UID), es.ResourceVersion); skip || err != nil {
			return err
		}
		o.Kube.Endpoints = append(o.Kube.Endpoints, Endpoints(&es)...)
	case "v1 Node":
		var n corev1.Node
		if err := decode(&n); err != nil {
			return err
		}
		if skip, err := o.remember(name, obj, h.Kind, "", n.Name, string(n.UID), n.ResourceVersion); skip || err != nil {
			return err
		}
		o.Kube.Nodes = append(o.Kube.Nodes, Node(&n))
	case "networking.k8s.io/v1 ServiceCIDR":
		var c networkingv1.ServiceCIDR
		if err := decode(&c); err != nil {
			return err
		}
		if skip, err := o.remember(name, obj, h.Kind, "", c.Name, string(c.UID), c.ResourceVersion); skip || err != nil {
			return err
		}
		o.Kube.ServiceCIDRs = append(o.Kube.ServiceCIDRs, ServiceCIDR(&c))
	default:
		if !calico.Is(h.APIVersion, h.Kind) {
			o.Ignored[gvk]++
			return nil
		}
		return o.addCalico(name, obj, h, what)
	}
	return nil
}

// addCalico converts one of Calico's objects. Only its metadata must be
// right: what else it holds goes to the ledger as Calico wrote it.
func (o *Objects) addCalico(name string, obj object, h *header, what string) error {
	var md struct {
		Metadata struct {
			UID             string `json:"uid"`
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(obj.raw, &md); err != nil {
		return decodeError(obj, what, err)
	}
	if h.Kind == calico.KindKubeControllers && h.Metadata.Name != "default" {
		// kube-controllers reads only the one named default.
		o.Ignored[h.APIVersion+" "+h.Kind]++
		return nil
	}
	if skip, err := o.remember(name, obj, h.Kind, "", h.Metadata.Name, md.Metadata.UID, md.Metadata.ResourceVersion); skip || err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(obj.raw))
	// Sequence numbers exceed 2^53: kept exact as json.Number.
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return decodeError(obj, what, err)
	}
	calico.Add(&o.Calico, m)
	return nil
}

// sawCalico reports whether any of Calico's IPAM objects was read.
func (o *Objects) sawCalico() bool {
	for k := range o.seen {
		if slices.Contains(calico.Kinds, k.kind) {
			return true
		}
	}
	return false
}

// defaultNamespace gives objects saved without a namespace the one kubectl
// would give them.
func defaultNamespace(ns *string) {
	if *ns == "" {
		*ns = "default"
	}
}

// remember records a kept object. It reports skip for an exact repeat and
// fails for an object without a name or a second, different version.
func (o *Objects) remember(name string, obj object, kind, namespace, objName, uid, rv string) (skip bool, err error) {
	if objName == "" {
		return false, errAt(obj.line, "%s has no metadata.name", kind)
	}
	k := objectKey{kind, namespace, objName}
	here := fmt.Sprintf("%s:%d", name, obj.line)
	if prev, ok := o.seen[k]; ok {
		if prev.uid == uid && prev.rv == rv && rv != "" {
			return true, nil
		}
		return false, errAt(obj.line, "%s %s appears again, with other contents (first at %s): give each object once",
			kind, snapshot.ObjectRef{Namespace: namespace, Name: objName}, prev.where)
	}
	o.seen[k] = objectOrigin{where: here, uid: uid, rv: rv}
	o.added = append(o.added, k)
	return false, nil
}

// FileSource reads the cluster objects from files that kubectl wrote, as
// ReadObjects reads them, merged into one snapshot.Kube.
type FileSource struct {
	// Paths are the files to read; "-" is Stdin.
	Paths []string
	// Stdin is read for the path "-"; nil means os.Stdin.
	Stdin io.Reader

	// kinds are the kinds the files must hold, from the rules that read
	// them (Narrow); nil means Pods, Services and EndpointSlices.
	kinds []string
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
func (f *FileSource) Name() string { return Name }

// Collect reads every file into s.Kube, and Calico's IPAM objects into
// s.Calico (nil when the files hold none). It fails, leaving s untouched, when
// a file cannot be read or parsed, or when the files together hold none of
// a kind the rules read (Pods, Services and EndpointSlices for the
// conntrack rules): judging flows against a partial cluster would report
// healthy flows as ghosts.
func (f *FileSource) Collect(ctx context.Context, s *snapshot.Snapshot) error {
	if len(f.Paths) == 0 {
		return errors.New("no kube objects file given")
	}
	objs := &Objects{}
	for _, p := range f.Paths {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := f.readFile(objs, p); err != nil {
			return err
		}
	}
	kinds := f.kinds
	if kinds == nil {
		kinds = defaultKinds
	}
	if err := objs.complete(f.Paths, kinds); err != nil {
		return err
	}
	if err := objs.whole(f.Paths); err != nil {
		return err
	}
	k := objs.Kube
	s.Kube = &k
	if objs.sawCalico() {
		c := objs.Calico
		calico.Sort(&c)
		s.Calico = &c
	}
	return nil
}

func (f *FileSource) readFile(objs *Objects, path string) error {
	if path == "-" {
		in := f.Stdin
		if in == nil {
			in = os.Stdin
		}
		return objs.Read("stdin", in)
	}
	file, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &missingFile{path: path, err: err}
	}
	if err != nil {
		return err
	}
	defer file.Close()
	return objs.Read(path, file)
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
func (o *Objects) whole(paths []string) error {
	podNS := map[string]bool{}
	for _, p := range o.Kube.Pods {
		podNS[p.Namespace] = true
	}
	why := ""
	for _, e := range o.Kube.Endpoints {
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
		for _, s := range o.Kube.Services {
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

// complete fails unless the objects include Pods, Services and
// EndpointSlices.
func (o *Objects) complete(paths []string, kinds []string) error {
	var missing []string
	for _, kind := range kinds {
		if !o.sawKind(kind) {
			missing = append(missing, kind)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	msg := fmt.Sprintf("%s: no %s found", strings.Join(paths, ", "), strings.Join(missing, ", no "))
	if len(o.Ignored) > 0 {
		var ig []string
		for k, n := range o.Ignored {
			ig = append(ig, fmt.Sprintf("%d %s", n, k))
		}
		sort.Strings(ig)
		msg += " (ignored: " + strings.Join(ig, ", ") + ")"
	}
	msg += "; save them all with: " + SaveCommand
	for _, k := range missing {
		if slices.Contains(calico.Kinds, k) {
			msg += ", and Calico's with: " + calico.SaveCommand
			break
		}
	}
	return errors.New(msg)
}

func (o *Objects) sawKind(kind string) bool {
	for k := range o.seen {
		if k.kind == kind {
			return true
		}
	}
	return false
}
