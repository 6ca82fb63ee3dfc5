package apicost

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
)

var codecs = serializer.NewCodecFactory(scheme.Scheme)

// encoding is how the API server encodes for mediaType: objects, and watch
// streams of events.
type encoding struct {
	mediaType string
	obj       runtime.Encoder
	info      runtime.SerializerInfo
}

func newEncoding(t testing.TB, mediaType string) encoding {
	t.Helper()
	info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), mediaType)
	if !ok {
		t.Fatalf("no serializer for %s", mediaType)
	}
	return encoding{mediaType: mediaType, info: info, obj: codecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion)}
}

func (e encoding) encode(t testing.TB, obj runtime.Object) []byte {
	t.Helper()
	b, err := runtime.Encode(e.obj, obj)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// watchStream encodes events as the API server's watch handler does: each a
// metav1.WatchEvent, framed by the stream serializer.
func (e encoding) watchStream(t testing.TB, events ...watchEvent) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := streaming.NewEncoder(e.info.StreamSerializer.Framer.NewFrameWriter(&buf), e.info.StreamSerializer.Serializer)
	for _, ev := range events {
		if err := enc.Encode(&metav1.WatchEvent{Type: string(ev.typ), Object: runtime.RawExtension{Raw: e.encode(t, ev.obj)}}); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

type watchEvent struct {
	typ watch.EventType
	obj runtime.Object
}

func testPod(i int) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps-0", Name: fmt.Sprintf("web-%d", i), Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{NodeName: "node-0", Containers: []corev1.Container{{Name: "app", Image: "registry.example.com/web:1"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: fmt.Sprintf("10.244.0.%d", i+1)},
	}
}

func bookmark(initialEnd bool) *corev1.Pod {
	p := &corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{ResourceVersion: "42"}}
	if initialEnd {
		p.Annotations = map[string]string{InitialEventsEnd: "true"}
	}
	return p
}

func TestCountObjects(t *testing.T) {
	list := &corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, ListMeta: metav1.ListMeta{ResourceVersion: "7"}}
	for i := range 5 {
		list.Items = append(list.Items, *testPod(i))
	}
	empty := &corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}}
	status := &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Code: 403}
	for _, mt := range []string{protobufType, "application/json"} {
		e := newEncoding(t, mt)
		for _, tc := range []struct {
			name string
			obj  runtime.Object
			want int
		}{
			{"list", list, 5},
			{"empty list", empty, 0},
			{"object", testPod(9), 1},
			{"status", status, 0},
		} {
			got, err := countObjects(bytes.NewReader(e.encode(t, tc.obj)), mt+"; charset=utf-8")
			if err != nil || got != tc.want {
				t.Errorf("%s, %s: %d, %v; want %d", mt, tc.name, got, err, tc.want)
			}
		}
	}
	if _, err := countObjects(strings.NewReader("{}"), "application/cbor"); err == nil {
		t.Error("CBOR was read")
	}
	pb := newEncoding(t, protobufType).encode(t, list)
	if _, err := countObjects(bytes.NewReader(pb[:len(pb)-3]), protobufType); err == nil {
		t.Error("a truncated protobuf list was read")
	}
	if _, err := countObjects(bytes.NewReader(pb[4:]), protobufType); err == nil {
		t.Error("a protobuf list without its prefix was read")
	}
}

func TestCountField(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		want int
		ok   bool
	}{
		{"none", nil, 0, true},
		{"varint, fixed64, two of field 2, fixed32", []byte{0x08, 0x96, 0x01, 0x09, 1, 2, 3, 4, 5, 6, 7, 8, 0x12, 0x01, 0xff, 0x12, 0x00, 0x1d, 1, 2, 3, 4}, 2, true},
		{"field 3 only", []byte{0x1a, 0x02, 0x12, 0x00}, 0, true},
		{"length beyond the end", []byte{0x12, 0x05, 0x00}, 0, false},
		{"group wire type", []byte{0x13}, 0, false},
	} {
		got, err := countField(tc.b, 2)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%s: %d, %v; want %d (ok %v)", tc.name, got, err, tc.want, tc.ok)
		}
	}
}

func TestDecodeWatch(t *testing.T) {
	events := []watchEvent{
		{watch.Added, testPod(0)}, {watch.Added, testPod(1)}, {watch.Bookmark, bookmark(true)},
		{watch.Modified, testPod(1)}, {watch.Bookmark, bookmark(false)}, {watch.Deleted, testPod(0)},
	}
	want := []WatchEvent{{Type: "ADDED"}, {Type: "ADDED"}, {Type: "BOOKMARK", InitialEnd: true}, {Type: "MODIFIED"}, {Type: "BOOKMARK"}, {Type: "DELETED"}}
	for _, mt := range []string{protobufType, "application/json"} {
		e := newEncoding(t, mt)
		stream := e.watchStream(t, events...)
		var got []WatchEvent
		err := decodeWatch(bytes.NewReader(stream), mt+";stream=watch", func(ev WatchEvent) { got = append(got, ev) })
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%s: %v, %v; want %v", mt, got, err, want)
		}
		got = nil
		if err := decodeWatch(bytes.NewReader(stream[:len(stream)-2]), mt, func(ev WatchEvent) { got = append(got, ev) }); err == nil {
			t.Errorf("%s: a truncated stream ended without error", mt)
		}
		if len(got) != len(want)-1 {
			t.Errorf("%s: truncated stream: %d events before the error, want %d", mt, len(got), len(want)-1)
		}
	}
}
