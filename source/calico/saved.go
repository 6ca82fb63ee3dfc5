package calico

import (
	"context"
	"errors"
	"strings"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/kubectl"
)

// savedKinds are the ledger's kinds in either API version, the
// KubeControllersConfiguration "default" only: kube-controllers reads no
// other.
func savedKinds() []kubectl.Kind {
	var kinds []kubectl.Kind
	for _, v := range []string{APIVersion, APIVersionV3} {
		for _, k := range Kinds {
			kind := kubectl.Kind{APIVersion: v, Kind: k}
			if k == KindKubeControllers {
				kind.Name = "default"
			}
			kinds = append(kinds, kind)
		}
	}
	return kinds
}

// keeper is what the saved objects are asked for their kinds:
// *kubectl.Files, or *kubectl.Objects.
type keeper interface {
	Keep(convert kubectl.Convert, kinds ...kubectl.Kind)
}

// keepSaved asks k for the ledger's kinds.
func keepSaved(k keeper) { k.Keep(convertSaved, savedKinds()...) }

// savedObject is one of the ledger's objects as Add takes it.
type savedObject map[string]any

// convertSaved keeps an object as Calico wrote it, for Add: only its
// envelope must read (kubectl.Objects checks it); what else it holds that
// cannot be read is the ledger's business, which Add lists in the object's
// Malformed. Sequence numbers exceed 2^53: they are kept exact, as
// json.Number.
func convertSaved(o *kubectl.Object) (any, error) {
	var m map[string]any
	if err := o.Decode(&m); err != nil {
		return nil, err
	}
	return savedObject(m), nil
}

// savedLedger converts the ledger's objects among those kept, or returns
// nil when there is none.
func savedLedger(objs *kubectl.Objects) *snapshot.Calico {
	var c snapshot.Calico
	saw := false
	for _, v := range objs.Kept {
		if m, ok := v.(savedObject); ok {
			Add(&c, m)
			saw = true
		}
	}
	if !saw {
		return nil
	}
	Sort(&c)
	return &c
}

// FileSource reads Calico's IPAM ledger from files that kubectl wrote: the
// files the kube source (source/kube/saved's FileSource) reads the
// cluster objects from, read once for both. It runs after that source.
type FileSource struct {
	files *kubectl.Files
}

// NewFileSource returns the source of the ledger in files, and asks files
// for its kinds (IPAMBlocks, IPAMHandles, BlockAffinities, IPPools and the
// KubeControllersConfiguration "default", as crd.projectcalico.org/v1 or
// projectcalico.org/v3 objects).
func NewFileSource(files *kubectl.Files) *FileSource {
	keepSaved(files)
	return &FileSource{files: files}
}

// Name returns "calico".
func (*FileSource) Name() string { return Name }

// Describe says how much of the ledger was read.
func (*FileSource) Describe(s *snapshot.Snapshot) string { return describeCalico(s.Calico) }

// Collect reads the ledger into s.Calico. It fails when the kube source,
// which reads the same files first, failed (s.Kube is nil): the files
// could not be read, or hold a part of a cluster, against which the ledger
// cannot be judged. When the files hold no object of the ledger it returns
// source.ErrUnsupported, with the command that saves them.
func (f *FileSource) Collect(ctx context.Context, s *snapshot.Snapshot) error {
	if s.Kube == nil {
		return errors.New("the saved objects could not be read (see the kube source)")
	}
	objs, err := f.files.Read(ctx)
	if err != nil {
		return err
	}
	c := savedLedger(objs)
	switch {
	case c == nil && plausible(s.Kube):
		return source.Unsupported("the saved objects hold no Calico IPAM object, though Calico runs in the cluster; save them with: %s", SaveCommand)
	case c == nil:
		return source.Unsupported("no Calico in the saved objects: no Calico IPAM object, and no calico-node pod")
	}
	s.Calico = c
	return nil
}

// plausible reports whether the saved pods show Calico running: a pod of
// namespace calico-system, or a calico-node or calico-kube-controllers pod.
func plausible(k *snapshot.Kube) bool {
	for _, p := range k.Pods {
		if p.Namespace == "calico-system" || strings.HasPrefix(p.Name, "calico-node-") || strings.HasPrefix(p.Name, "calico-kube-controllers-") {
			return true
		}
	}
	return false
}
