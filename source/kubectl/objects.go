package kubectl

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"strings"
)

// Kind is a kind of object a ledger keeps.
type Kind struct {
	// APIVersion and Kind name it as the objects do: "v1" and "Pod",
	// "discovery.k8s.io/v1" and "EndpointSlice".
	APIVersion, Kind string
	// Namespaced is set for a kind whose objects live in a namespace: one
	// saved without a namespace is in "default", as kubectl would put it.
	// The namespace of a cluster-scoped kind's object is not read.
	Namespaced bool
	// Name, when set, is the name of the only object of the kind kept; the
	// others are counted in Objects.Ignored.
	Name string
}

func (k Kind) key() string { return k.APIVersion + " " + k.Kind }

// Convert turns an object of a kind kept into what the ledger keeps of it.
// It is called once per object, during Read; the Object is not to be kept.
// An error fails the read: return the error of Object.Decode as it is, so
// that it names the place of the field that was wrong.
type Convert func(*Object) (any, error)

// Objects are the objects read from one or more inputs: what Convert made
// of those of the kinds kept, and a count of the others. The zero value
// keeps no kind; call Keep before Read.
type Objects struct {
	// Kept holds what Convert returned for each object of a kind kept,
	// in the order the inputs listed them. An object repeated exactly is
	// kept once.
	Kept []any
	// Ignored counts the objects of other kinds by "apiVersion Kind"
	// ("apps/v1 Deployment").
	Ignored map[string]int

	kinds map[string]keep
	// seen remembers where each object kept was read, to tell a repeat of
	// it (skipped) from another version of it (an error).
	seen map[objectKey]origin
	// added lists the keys of seen in the order they were added, to roll
	// back to a checkpoint.
	added []objectKey
}

type keep struct {
	kind    Kind
	convert Convert
}

type objectKey struct {
	kind, namespace, name string
}

type origin struct {
	where   string // name:line
	uid, rv string
}

// Keep asks for the objects of kinds, each converted by convert. Asking
// twice for one kind is a mistake of the caller's: Keep panics.
func (o *Objects) Keep(convert Convert, kinds ...Kind) {
	if o.kinds == nil {
		o.kinds = map[string]keep{}
	}
	for _, k := range kinds {
		if _, ok := o.kinds[k.key()]; ok {
			panic("kubectl: " + k.key() + " is kept twice")
		}
		o.kinds[k.key()] = keep{kind: k, convert: convert}
	}
}

// Saw reports whether an object of kind (a kind kept: "Pod") was read.
func (o *Objects) Saw(kind string) bool {
	for k := range o.seen {
		if k.kind == kind {
			return true
		}
	}
	return false
}

// Read adds the objects in r, which it calls name in errors, to o. It reads
// YAML (a stream of documents separated by ---) or JSON (one or more
// values); each document or value is an object or a list of objects (kind
// List, or PodList, ServiceList, ...: the items of a typed list may leave
// out apiVersion and kind). The objects of the kinds kept are converted;
// the others are counted in Ignored.
// YAML reads as Kubernetes reads it (sigs.k8s.io/yaml, YAML 1.1): unquoted
// y, n, yes, no, on and off are booleans, merge keys (<<) are expanded and a
// key given twice is an error.
//
// Every error is an *Error, which starts with "name:line: ": the line of a
// syntax error as the YAML or JSON decoder names it, or else the line where
// the offending object starts (in JSON, where the offending field's value
// starts), the object being named after its kind, namespace and name. An
// object without a kind or apiVersion, or whose envelope (kind, metadata)
// has a field of the wrong type, is an error; so is an object kept without
// a name, or that appears twice with different contents (two different
// resourceVersions). An object repeated exactly (same uid and
// resourceVersion) is kept once. On error, o holds what was read before it.
func (o *Objects) Read(name string, r io.Reader) error {
	if o.Ignored == nil {
		o.Ignored = map[string]int{}
	}
	if o.seen == nil {
		o.seen = map[objectKey]origin{}
	}
	rd := &reader{name: name, objs: o}
	err := rd.read(r)
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return &Error{Name: name, Line: max(e.Line, 1), Err: e.Err}
	}
	return &Error{Name: name, Line: max(rd.line(), 1), Err: err}
}

// Error is an error at a line of an input.
type Error struct {
	// Name is the input's, as Read was given it.
	Name string
	Line int
	Err  error
}

func (e *Error) Error() string { return fmt.Sprintf("%s:%d: %v", e.Name, e.Line, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// errAt is an error at a line of the input being read.
func errAt(line int, format string, args ...any) error {
	return &Error{Line: line, Err: fmt.Errorf(format, args...)}
}

// errorLine returns the line an error names, or 0.
func errorLine(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Line
	}
	return 0
}

// checkpoint is the state of Objects at one moment.
type checkpoint struct {
	kept, added int
	ignored     map[string]int
}

func (o *Objects) checkpoint() checkpoint {
	return checkpoint{kept: len(o.Kept), added: len(o.added), ignored: maps.Clone(o.Ignored)}
}

// rollback forgets what was added since c was taken.
func (o *Objects) rollback(c checkpoint) {
	clear(o.Kept[c.kept:])
	o.Kept = o.Kept[:c.kept]
	for _, k := range o.added[c.added:] {
		delete(o.seen, k)
	}
	o.added = o.added[:c.added]
	o.Ignored = c.ignored
}

// add converts an object of a kind kept, or counts one of another kind.
func (o *Objects) add(name string, obj object, h *header) error {
	gvk := h.APIVersion + " " + h.Kind
	k, ok := o.kinds[gvk]
	if !ok || k.kind.Name != "" && h.Metadata.Name != k.kind.Name {
		o.Ignored[gvk]++
		return nil
	}
	what := h.what()
	var md struct {
		Metadata struct {
			UID             string `json:"uid"`
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(obj.raw, &md); err != nil {
		return decodeError(obj, what, err)
	}
	ns := ""
	if k.kind.Namespaced {
		ns = cmp.Or(h.Metadata.Namespace, "default")
	}
	if skip, err := o.remember(name, obj, h.Kind, ns, h.Metadata.Name, md.Metadata.UID, md.Metadata.ResourceVersion); skip || err != nil {
		return err
	}
	v, err := k.convert(&Object{
		APIVersion: h.APIVersion, Kind: h.Kind,
		Name: h.Metadata.Name, Namespace: ns,
		UID: md.Metadata.UID, ResourceVersion: md.Metadata.ResourceVersion,
		Raw: obj.raw, name: name, src: obj, what: what,
	})
	if err != nil {
		if errorLine(err) == 0 {
			return errAt(obj.line, "%s: %w", what, err)
		}
		return err
	}
	o.Kept = append(o.Kept, v)
	return nil
}

// remember records an object kept. It reports skip for an exact repeat and
// fails for an object without a name or a second, different version.
func (o *Objects) remember(name string, obj object, kind, namespace, objName, uid, rv string) (skip bool, err error) {
	if objName == "" {
		return false, errAt(obj.line, "%s has no metadata.name", kind)
	}
	k := objectKey{kind, namespace, objName}
	if prev, ok := o.seen[k]; ok {
		if prev.uid == uid && prev.rv == rv && rv != "" {
			return true, nil
		}
		return false, errAt(obj.line, "%s %s appears again, with other contents (first at %s): give each object once",
			kind, ref(namespace, objName), prev.where)
	}
	o.seen[k] = origin{where: fmt.Sprintf("%s:%d", name, obj.line), uid: uid, rv: rv}
	o.added = append(o.added, k)
	return false, nil
}

// ref names an object as namespace/name, or name.
func ref(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// header is what every object says about itself.
type header struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Metadata   metadata `json:"metadata"`
}

type metadata struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

// what names the object in errors: its kind, and its namespace and name as
// written.
func (h *header) what() string {
	if h.Metadata.Name == "" {
		return h.Kind
	}
	return h.Kind + " " + ref(h.Metadata.Namespace, h.Metadata.Name)
}

// isList reports whether kind is a list: List, PodList, ...
func isList(kind string) bool { return strings.HasSuffix(kind, "List") }

// itemDefaults returns the apiVersion and kind that the items of a list
// leaving them out have: none for List, Pod in v1 for a v1 PodList.
func itemDefaults(h *header) header {
	kind := strings.TrimSuffix(h.Kind, "List")
	if kind == "" {
		return header{}
	}
	return header{APIVersion: h.APIVersion, Kind: kind}
}
