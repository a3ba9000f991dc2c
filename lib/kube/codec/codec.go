// Package codec encodes and decodes built-in Kubernetes objects with the
// k8s.io/apimachinery serializers: JSON, YAML and the protobuf envelope
// (k8s\x00 + runtime.Unknown) on the wire, and protobuf in the store, as
// kube-apiserver stores built-in kinds.
//
// Stored objects never carry metadata.resourceVersion: it is the store's
// mod_revision of the key, set on every read.
package codec

import (
	"bytes"
	"fmt"
	"io"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	sigsyaml "sigs.k8s.io/yaml"
)

// Codec holds the scheme of served kinds and their serializers. It is safe
// for concurrent use.
type Codec struct {
	scheme     *runtime.Scheme
	json       *json.Serializer
	yaml       *json.Serializer
	strictJSON *json.Serializer
	strictYAML *json.Serializer
	proto      *protobuf.Serializer
}

// New returns a Codec for the built-in kinds meridian serves.
func New() (*Codec, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, eventsv1.AddToScheme, coordinationv1.AddToScheme,
		rbacv1.AddToScheme, flowcontrolv1.AddToScheme, admissionregistrationv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("codec: %w", err)
		}
	}
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	// Options objects also travel as meta.k8s.io/v1.
	s.AddKnownTypes(metav1.SchemeGroupVersion, &metav1.DeleteOptions{}, &metav1.CreateOptions{}, &metav1.UpdateOptions{}, &metav1.PatchOptions{})
	return &Codec{
		scheme:     s,
		json:       json.NewSerializerWithOptions(json.DefaultMetaFactory, s, s, json.SerializerOptions{}),
		yaml:       json.NewSerializerWithOptions(json.DefaultMetaFactory, s, s, json.SerializerOptions{Yaml: true}),
		strictJSON: json.NewSerializerWithOptions(json.DefaultMetaFactory, s, s, json.SerializerOptions{Strict: true}),
		strictYAML: json.NewSerializerWithOptions(json.DefaultMetaFactory, s, s, json.SerializerOptions{Yaml: true, Strict: true}),
		proto:      protobuf.NewSerializer(s, s),
	}, nil
}

// Scheme returns the scheme of served kinds.
func (c *Codec) Scheme() *runtime.Scheme { return c.scheme }

// SetKind fills obj's apiVersion and kind from the scheme.
func (c *Codec) SetKind(obj runtime.Object) error {
	gvks, _, err := c.scheme.ObjectKinds(obj)
	if err != nil {
		return fmt.Errorf("codec: %w", err)
	}
	obj.GetObjectKind().SetGroupVersionKind(gvks[0])
	return nil
}

func (c *Codec) serializer(mediaType string) (runtime.Serializer, error) {
	switch mediaType {
	case negotiation.JSON, "":
		return c.json, nil
	case negotiation.YAML:
		return c.yaml, nil
	case negotiation.Protobuf:
		return c.proto, nil
	}
	return nil, fmt.Errorf("codec: unsupported media type %q", mediaType)
}

// Encode writes obj in mediaType, with apiVersion and kind set.
func (c *Codec) Encode(w io.Writer, obj runtime.Object, mediaType string) error {
	s, err := c.serializer(mediaType)
	if err != nil {
		return err
	}
	if obj.GetObjectKind().GroupVersionKind().Empty() {
		if err := c.SetKind(obj); err != nil {
			return err
		}
	}
	return s.Encode(obj, w)
}

// EncodeToBytes is Encode into a new slice.
func (c *Codec) EncodeToBytes(obj runtime.Object, mediaType string) ([]byte, error) {
	var buf bytes.Buffer
	if err := c.Encode(&buf, obj, mediaType); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Decode reads data of mediaType into into. gvk is the kind the endpoint
// serves: a body without apiVersion/kind gets it, and a body naming another
// kind is an error. Unknown and duplicate fields are dropped; DecodeStrict
// reports them.
func (c *Codec) Decode(data []byte, mediaType string, gvk schema.GroupVersionKind, into runtime.Object) error {
	_, err := c.decode(data, mediaType, gvk, into, false)
	return err
}

// DecodeStrict is Decode that also returns the unknown and duplicate
// fields of a JSON or YAML body, one message each (e.g. `unknown field
// "spec.foo"`). The object is decoded either way.
func (c *Codec) DecodeStrict(data []byte, mediaType string, gvk schema.GroupVersionKind, into runtime.Object) ([]string, error) {
	return c.decode(data, mediaType, gvk, into, true)
}

func (c *Codec) decode(data []byte, mediaType string, gvk schema.GroupVersionKind, into runtime.Object, strict bool) ([]string, error) {
	s, err := c.serializer(mediaType)
	if err != nil {
		return nil, err
	}
	if strict {
		switch mediaType {
		case negotiation.JSON, "":
			s = c.strictJSON
		case negotiation.YAML:
			s = c.strictYAML
		}
	}
	var problems []string
	_, got, err := s.Decode(data, &gvk, into)
	if err != nil {
		sde, ok := runtime.AsStrictDecodingError(err)
		if !ok {
			return nil, err
		}
		for _, e := range sde.Errors() {
			problems = append(problems, e.Error())
		}
	}
	if got != nil && *got != gvk {
		return nil, fmt.Errorf("the body is a %s, but this endpoint serves %s", got, gvk)
	}
	return problems, nil
}

// EncodeStorage returns the stored form of obj: the protobuf envelope, with
// resourceVersion cleared (it is the key's mod_revision).
func (c *Codec) EncodeStorage(obj runtime.Object) ([]byte, error) {
	acc, err := meta.Accessor(obj)
	if err != nil {
		return nil, fmt.Errorf("codec: %w", err)
	}
	rv := acc.GetResourceVersion()
	acc.SetResourceVersion("")
	defer acc.SetResourceVersion(rv)
	if err := c.SetKind(obj); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := c.proto.Encode(obj, &buf); err != nil {
		return nil, fmt.Errorf("codec: encode for storage: %w", err)
	}
	return buf.Bytes(), nil
}

// DecodeStorage reads a stored value into into and sets its resourceVersion
// to modRevision.
func (c *Codec) DecodeStorage(data []byte, modRevision int64, into runtime.Object) error {
	if _, _, err := c.proto.Decode(data, nil, into); err != nil {
		return fmt.Errorf("codec: decode stored object: %w", err)
	}
	acc, err := meta.Accessor(into)
	if err != nil {
		return fmt.Errorf("codec: %w", err)
	}
	acc.SetResourceVersion(fmt.Sprint(modRevision))
	return nil
}

// DecodeOptions decodes an options object (DeleteOptions and the like),
// which clients send with apiVersion v1 or meta.k8s.io/v1, or without one.
func (c *Codec) DecodeOptions(data []byte, mediaType string, into runtime.Object) error {
	if mediaType == negotiation.Protobuf {
		_, _, err := c.proto.Decode(data, nil, into)
		return err
	}
	return sigsyaml.Unmarshal(data, into)
}
