// Package watchframe encodes watch events as the bytes of a Kubernetes
// watch stream, so that whoever encodes an event once can write the same
// bytes to every watcher that asked for the same format:
//
//	JSON:      {"type":"ADDED","object":{...}}\n
//	protobuf:  | length uint32 BE | meta/v1 WatchEvent, raw protobuf |
//	           whose object is the k8s\x00 envelope of the object (as
//	           kube-apiserver frames it and client-go decodes it)
//	Table:     JSON frames whose objects are one-row Tables (kubectl get -w)
package watchframe

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/metaonly"
	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/kube/table"
	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// Format is one wire format of a watch stream.
type Format struct {
	// MediaType is negotiation.JSON or negotiation.Protobuf.
	MediaType string
	// Table renders ADDED, MODIFIED and DELETED objects as one-row Tables
	// (JSON only), with IncludeObject in their rows.
	Table         bool
	IncludeObject metav1.IncludeObjectPolicy
	// Partial sends ADDED, MODIFIED and DELETED objects as
	// PartialObjectMetadata (JSON or protobuf).
	Partial bool
}

// ContentType is the Content-Type of a stream in this format.
func (f Format) ContentType() string {
	if f.MediaType == negotiation.Protobuf {
		return negotiation.Protobuf + ";stream=watch"
	}
	return negotiation.JSON
}

// Encoder encodes the events of one resource in one format. It is safe for
// concurrent use.
type Encoder struct {
	codec  *codec.Codec
	res    *registry.Resource
	format Format
	now    func() time.Time
}

// NewEncoder returns an encoder; now is the clock for Table ages (nil:
// time.Now).
func NewEncoder(c *codec.Codec, res *registry.Resource, f Format, now func() time.Time) *Encoder {
	if now == nil {
		now = time.Now
	}
	return &Encoder{codec: c, res: res, format: f, now: now}
}

// Frame encodes one event.
//
// A protobuf frame of an object with generated marshalers (every built-in
// kind, PartialObjectMetadata, Status) is laid out by hand in one buffer
// of its final size; see protoFrame. Everything else goes through the
// codec.
func (e *Encoder) Frame(t watch.EventType, obj runtime.Object) ([]byte, error) {
	var raw []byte
	var err error
	object := t == watch.Added || t == watch.Modified || t == watch.Deleted
	if e.format.Table && object {
		tbl, terr := table.Render(e.codec, e.res, obj, e.format.IncludeObject, e.now())
		if terr != nil {
			return nil, terr
		}
		raw, err = e.codec.EncodeToBytes(tbl, negotiation.JSON)
	} else {
		if e.format.Partial && object {
			p, perr := metaonly.Object(obj)
			if perr != nil {
				return nil, perr
			}
			obj = p
		}
		if e.format.MediaType == negotiation.Protobuf {
			// An Unknown is its own envelope: the codec writes it as it is.
			if _, unknown := obj.(*runtime.Unknown); !unknown {
				if m, ok := obj.(runtime.ProtobufMarshaller); ok {
					return e.protoFrame(t, obj, m)
				}
			}
		}
		raw, err = e.codec.EncodeToBytes(obj, e.format.MediaType)
	}
	if err != nil {
		return nil, fmt.Errorf("watchframe: %w", err)
	}
	if e.format.MediaType == negotiation.Protobuf {
		ev := &metav1.WatchEvent{Type: string(t), Object: runtime.RawExtension{Raw: raw}}
		data, err := ev.Marshal()
		if err != nil {
			return nil, fmt.Errorf("watchframe: %w", err)
		}
		out := make([]byte, 4, 4+len(data))
		binary.BigEndian.PutUint32(out, uint32(len(data)))
		return append(out, data...), nil
	}
	// The codec writes the event as {"type":"<t>","object":raw} and a
	// newline: encoding/json writes a RawExtension's bytes compacted, with
	// the HTML escaping the codec's encoder already applied to raw. raw,
	// from that encoder, is compact but for its trailing newline, so the
	// frame is laid out here without re-scanning it, which would be a
	// large part of the cost of a small object's frame. An Unknown's bytes
	// are not the encoder's: it goes through the codec.
	if _, unknown := obj.(*runtime.Unknown); !unknown || e.format.Table {
		if n := len(raw); n > 0 && raw[n-1] == '\n' {
			raw = raw[:n-1]
			return AppendJSONFrame(make([]byte, 0, JSONFrameSize(t, len(raw))), t, raw), nil
		}
	}
	ev := &metav1.WatchEvent{Type: string(t), Object: runtime.RawExtension{Raw: raw}}
	data, err := e.codec.EncodeToBytes(ev, negotiation.JSON)
	if err != nil {
		return nil, fmt.Errorf("watchframe: %w", err)
	}
	if n := len(data); n > 0 && data[n-1] != '\n' {
		data = append(data, '\n')
	}
	return data, nil
}

// A JSON frame is {"type":"<t>","object":<object>} and a newline.
const (
	jsonFrameHead   = `{"type":"`
	jsonFrameObject = `","object":`
	jsonFrameTail   = "}\n"
)

// JSONFrameSize is the size of a JSON frame of type t whose object's
// JSON is objectSize bytes.
func JSONFrameSize(t watch.EventType, objectSize int) int {
	return len(jsonFrameHead) + len(t) + len(jsonFrameObject) + objectSize + len(jsonFrameTail)
}

// AppendJSONFrame appends the JSON frame of type t whose object is the
// compact JSON object (no trailing newline): byte for byte the codec's
// encoding of the WatchEvent.
func AppendJSONFrame(dst []byte, t watch.EventType, object []byte) []byte {
	dst = append(dst, jsonFrameHead...)
	dst = append(dst, t...)
	dst = append(dst, jsonFrameObject...)
	dst = append(dst, object...)
	return append(dst, jsonFrameTail...)
}

// JSONFrameObject returns the object of a JSON frame of type t (the bytes
// AppendJSONFrame was given), sharing frame's memory; false when frame is
// not a JSON frame of type t with an object.
func JSONFrameObject(frame []byte, t watch.EventType) ([]byte, bool) {
	if len(frame) < JSONFrameSize(t, 2) {
		return nil, false
	}
	rest, ok := bytes.CutPrefix(frame, []byte(jsonFrameHead))
	if ok {
		rest, ok = bytes.CutPrefix(rest, []byte(t))
	}
	if ok {
		rest, ok = bytes.CutPrefix(rest, []byte(jsonFrameObject))
	}
	if ok {
		rest, ok = bytes.CutSuffix(rest, []byte(jsonFrameTail))
	}
	if !ok || rest[0] != '{' || rest[len(rest)-1] != '}' {
		return nil, false
	}
	return rest[:len(rest):len(rest)], true
}

// envelopePrefix starts every protobuf envelope (the protobuf serializer's
// prefix).
var envelopePrefix = [4]byte{'k', '8', 's', 0}

// Field tags of the messages protoFrame writes.
const (
	tagEventType   = 1<<3 | byte(protowire.BytesType) // WatchEvent.type
	tagEventObject = 2<<3 | byte(protowire.BytesType) // WatchEvent.object
	tagRawExtRaw   = 1<<3 | byte(protowire.BytesType) // RawExtension.raw
)

// protoFrame encodes a protobuf frame of obj in one allocation of its
// exact size:
//
//	| length uint32 BE | 0a len "ADDED" | 12 len | 0a len | k8s\x00 Unknown{TypeMeta, raw, "", ""} |
//	                    `----------------- WatchEvent ------------------------------------------'
//	                                      `--- RawExtension ---------------------------------'
//
// byte for byte what the codec's protobuf serializer and
// WatchEvent.Marshal give (TestProtoFrameIsCodecFrame), without the three
// intermediate buffers (object, envelope, event) that path allocates and
// copies, which in a relist storm, where every object's frame is encoded
// for the first time, would be more garbage than the frames themselves.
func (e *Encoder) protoFrame(t watch.EventType, obj runtime.Object, m runtime.ProtobufMarshaller) ([]byte, error) {
	gvk := obj.GetObjectKind().GroupVersionKind()
	if gvk.Empty() {
		// As codec.Encode does: the kind written is the scheme's.
		if err := e.codec.SetKind(obj); err != nil {
			return nil, fmt.Errorf("watchframe: %w", err)
		}
		gvk = obj.GetObjectKind().GroupVersionKind()
	}
	unk := runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind}}
	rawSize := m.Size()
	// Unknown with raw: NestedMarshalTo writes it, raw included.
	unkSize := unk.Size() + 1 + protowire.SizeVarint(uint64(rawSize)) + rawSize
	envSize := len(envelopePrefix) + unkSize
	out := make([]byte, 0, FrameSize(t, envSize))
	out = AppendFrameHead(out, t, envSize)
	out = append(out, envelopePrefix[:]...)
	n, err := unk.NestedMarshalTo(out[len(out):cap(out)], m, uint64(rawSize))
	if err != nil {
		return nil, fmt.Errorf("watchframe: %w", err)
	}
	if n != unkSize {
		return nil, fmt.Errorf("watchframe: %T encoded to %d bytes, want %d", obj, n, unkSize)
	}
	return out[:cap(out)], nil
}

// FrameSize is the size of a protobuf frame of event type t whose object's
// envelope is envSize bytes.
func FrameSize(t watch.EventType, envSize int) int {
	return 4 + eventSize(t, envSize)
}

// eventSize is the size of the WatchEvent of such a frame.
func eventSize(t watch.EventType, envSize int) int {
	extSize := rawExtSize(envSize)
	return 1 + protowire.SizeVarint(uint64(len(t))) + len(t) + 1 + protowire.SizeVarint(uint64(extSize)) + extSize
}

// rawExtSize is the size of the RawExtension of an envelope of envSize
// bytes.
func rawExtSize(envSize int) int { return 1 + protowire.SizeVarint(uint64(envSize)) + envSize }

// AppendFrameHead appends what precedes the object's envelope in a
// protobuf frame of event type t whose envelope is envSize bytes: the
// frame's length, the WatchEvent's type, and the tags and lengths of its
// object and the RawExtension's raw. The envelope must follow, exactly
// envSize bytes: the frame is then FrameSize(t, envSize) bytes.
//
// It lets a frame be written wherever it goes (a batch being sent), its
// envelope spliced from an object's stored bytes (protolist), byte for
// byte what Frame encodes for the decoded object.
func AppendFrameHead(dst []byte, t watch.EventType, envSize int) []byte {
	evSize := eventSize(t, envSize)
	dst = binary.BigEndian.AppendUint32(dst, uint32(evSize))
	dst = append(dst, tagEventType)
	dst = protowire.AppendString(dst, string(t))
	dst = append(dst, tagEventObject)
	dst = protowire.AppendVarint(dst, uint64(rawExtSize(envSize)))
	dst = append(dst, tagRawExtRaw)
	return protowire.AppendVarint(dst, uint64(envSize))
}
