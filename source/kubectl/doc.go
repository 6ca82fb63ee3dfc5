// Package kubectl reads what kubectl get -o yaml|json prints: a stream of
// YAML documents or JSON values, each an object or a list of objects, into
// the objects of the kinds the ledgers ask for, each placed at its file and
// line, an object saved twice kept once and two versions of one an error.
// It knows Kubernetes' object envelope (apiVersion, kind, metadata, lists)
// and nothing of what a kind means: the ledgers convert what they asked
// for, and nothing here judges.
//
// YAML is split into documents by apimachinery's YAMLReader and converted
// by sigs.k8s.io/yaml, a document at a time, so a YAML List is held whole
// while it is read. JSON is read by a streaming reader of this package's, a
// list's items one at a time, as the library's decoders hold a whole value:
// reading the List kubectl get pods -A -o json prints for 150,000 pods
// (1,307 MB), BenchmarkReadPodList measured a peak heap of 117 MB through
// it (59 MB of which it keeps: each pod's name, and what tells repeats
// apart) against 5,236 MB through apimachinery's YAMLOrJSONDecoder. The
// same List as YAML (588 MB) takes 1,754 MB. One JSON object larger than
// MaxObject is refused as it is read (an annotation of 300 MB gzipped into
// a bundle is a few hundred KB): the API server stores none.
package kubectl
