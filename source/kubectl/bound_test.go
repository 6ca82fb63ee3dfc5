package kubectl

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// One object larger than MaxObject is refused, at its line, before it is
// held whole: a pod with an annotation of 17 MiB. A list larger than it,
// of objects that are not, reads.
func TestReadBoundsAnObject(t *testing.T) {
	pod := func(name, annotation string) string {
		return `{"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": "web", "name": "` + name + `", "uid": "u-` + name + `", "annotations": {"a": "` + annotation + `"}}}`
	}
	var big bytes.Buffer
	big.WriteString("{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [\n")
	big.WriteString(pod("small", "x") + ",\n")
	big.WriteString(pod("huge", strings.Repeat("x", 17<<20)) + "\n]}\n")
	o := &Objects{}
	typed(o)
	err := o.Read("objects.json", &big)
	if !errors.Is(err, ErrObjectTooLarge) || !strings.HasPrefix(err.Error(), "objects.json:3: an object larger than 16 MiB") {
		t.Errorf("%v", err)
	}

	var many bytes.Buffer
	many.WriteString("{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [\n")
	for i := range 18 {
		if i > 0 {
			many.WriteString(",\n")
		}
		many.WriteString(pod(fmt.Sprint("p", i), strings.Repeat("x", 1<<20)))
	}
	many.WriteString("\n]}\n")
	o = &Objects{}
	if err := o.Read("many.json", &many); err != nil || o.Ignored["v1 Pod"] != 18 {
		t.Errorf("a list of 18 MiB of objects of 1 MiB: %v, %v", err, o.Ignored)
	}
}
