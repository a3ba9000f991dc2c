package codec

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	sigsyaml "sigs.k8s.io/yaml"
)

// ErrNoProtobuf is the error of encoding or decoding a custom resource as
// protobuf: as kube-apiserver, meridian serves custom resources in JSON
// and YAML only.
var ErrNoProtobuf = errors.New("codec: custom resources have no protobuf encoding")

// Custom resources are *unstructured.Unstructured (lists
// *unstructured.UnstructuredList): encoded as JSON or YAML on the wire and
// as JSON in the store, as kube-apiserver stores them. Their apiVersion
// and kind are what the object (or, decoding, the into object) carries:
// the codec's scheme does not know them.

// isUnstructured reports whether obj is a custom resource or a list of
// them.
func isUnstructured(obj runtime.Object) bool {
	switch obj.(type) {
	case *unstructured.Unstructured, *unstructured.UnstructuredList:
		return true
	}
	return false
}

// encodeUnstructured writes a custom resource or list in mediaType.
func encodeUnstructured(w io.Writer, obj runtime.Object, mediaType string) error {
	switch mediaType {
	case negotiation.JSON, "":
		return encodeUnstructuredJSON(w, obj)
	case negotiation.YAML:
		var buf bytes.Buffer
		if err := encodeUnstructuredJSON(&buf, obj); err != nil {
			return err
		}
		y, err := sigsyaml.JSONToYAML(buf.Bytes())
		if err != nil {
			return fmt.Errorf("codec: %w", err)
		}
		_, err = w.Write(y)
		return err
	case negotiation.Protobuf:
		return ErrNoProtobuf
	}
	return fmt.Errorf("codec: unsupported media type %q", mediaType)
}

// encodeUnstructuredJSON writes obj as unstructured.UnstructuredJSONScheme
// does (its JSON and a newline): a custom resource through appendJSON,
// anything appendJSON leaves to encoding/json (and lists) through the
// scheme.
func encodeUnstructuredJSON(w io.Writer, obj runtime.Object) error {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return unstructured.UnstructuredJSONScheme.Encode(obj, w)
	}
	var b []byte
	bb, toBuffer := w.(*bytes.Buffer)
	if toBuffer {
		b = bb.AvailableBuffer()
	}
	b, ok = appendJSON(b, u.Object)
	if !ok {
		return unstructured.UnstructuredJSONScheme.Encode(obj, w)
	}
	_, err := w.Write(append(b, '\n'))
	return err
}

// decodeUnstructured reads a JSON or YAML body into into. A body without
// apiVersion/kind gets gvk's; a body naming another is an error.
func decodeUnstructured(data []byte, mediaType string, gvk schema.GroupVersionKind, into *unstructured.Unstructured) error {
	switch mediaType {
	case negotiation.JSON, "":
	case negotiation.YAML:
		j, err := sigsyaml.YAMLToJSON(data)
		if err != nil {
			return fmt.Errorf("codec: %w", err)
		}
		data = j
	case negotiation.Protobuf:
		return ErrNoProtobuf
	default:
		return fmt.Errorf("codec: unsupported media type %q", mediaType)
	}
	m := map[string]any{}
	if err := utiljson.Unmarshal(data, &m); err != nil {
		return err
	}
	into.Object = m
	got := into.GroupVersionKind()
	if got.Empty() {
		into.SetGroupVersionKind(gvk)
		return nil
	}
	if got.Kind == "" {
		got.Kind = gvk.Kind
	}
	if got.Version == "" && got.Group == "" {
		got.Group, got.Version = gvk.Group, gvk.Version
	}
	if got != gvk {
		return fmt.Errorf("the body is a %s, but this endpoint serves %s", got, gvk)
	}
	into.SetGroupVersionKind(gvk)
	return nil
}

// decodeUnstructuredStorage reads a stored custom resource into into,
// keeping into's apiVersion and kind when it has them: with conversion
// None, an object read through another version than the stored one only
// differs in apiVersion.
func decodeUnstructuredStorage(data []byte, into *unstructured.Unstructured) error {
	gvk := into.GroupVersionKind()
	m := map[string]any{}
	if err := utiljson.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("codec: decode stored object: %w", err)
	}
	into.Object = m
	if !gvk.Empty() {
		into.SetGroupVersionKind(gvk)
	}
	return nil
}
