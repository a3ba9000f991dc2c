// Package protolist reads stored built-in objects without decoding them:
// it builds protobuf list responses and objects' envelopes (a Get's, a
// watch event's object) from their stored bytes, and reads the metadata
// that selectors and the garbage collector need.
//
// # Wire formats
//
// A stored built-in object (codec.EncodeStorage) is the protobuf envelope
//
//	"k8s\x00" Unknown{1: TypeMeta{1: apiVersion, 2: kind}, 2: raw, 3: contentEncoding "", 4: contentType ""}
//
// where raw is the object's message. Field 1 of every built-in kind is its
// ObjectMeta, and ObjectMeta's field 6 is resourceVersion, which the store
// leaves empty: the key's mod_revision is the resourceVersion.
//
// A protobuf list response is the same envelope around a <Kind>List:
//
//	"k8s\x00" Unknown{1: TypeMeta{apiVersion, <Kind>List}, 2: <Kind>List, 3: "", 4: ""}
//	<Kind>List{1: ListMeta, 2: item, 2: item, …}
//
// so each item is a stored raw with its resourceVersion filled in, behind
// a tag and a length. The Writer lays the bytes out exactly as the
// generated (gogo) marshalers do — fields in number order, every string
// written even when empty — so a spliced list is byte for byte what
// decoding every object and encoding the typed list gives.
package protolist

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// ErrNotSpliceable reports a stored value whose bytes cannot be spliced
// into a list with the guarantee of the package comment (another kind, a
// content encoding, a field repeated where the decoder would merge or
// override, malformed protobuf). The caller decodes such values instead.
var ErrNotSpliceable = errors.New("protolist: stored value cannot be spliced")

// envelopePrefix starts every protobuf envelope.
var envelopePrefix = []byte{'k', '8', 's', 0}

// Field numbers, from k8s.io/apimachinery's and k8s.io/api's
// generated.proto files.
const (
	unknownTypeMetaField        protowire.Number = 1  // runtime.Unknown.typeMeta
	unknownRawField             protowire.Number = 2  // runtime.Unknown.raw
	unknownContentEncodingField protowire.Number = 3  // runtime.Unknown.contentEncoding
	unknownContentTypeField     protowire.Number = 4  // runtime.Unknown.contentType
	typeMetaAPIVersionField     protowire.Number = 1  // runtime.TypeMeta.apiVersion
	typeMetaKindField           protowire.Number = 2  // runtime.TypeMeta.kind
	objectMetaField             protowire.Number = 1  // metadata of every built-in kind
	nameField                   protowire.Number = 1  // ObjectMeta.name
	namespaceField              protowire.Number = 3  // ObjectMeta.namespace
	uidField                    protowire.Number = 5  // ObjectMeta.uid
	resourceVersionField        protowire.Number = 6  // ObjectMeta.resourceVersion
	deletionTimestampField      protowire.Number = 9  // ObjectMeta.deletionTimestamp
	labelsField                 protowire.Number = 11 // ObjectMeta.labels, map entries {1: key, 2: value}
	ownerReferencesField        protowire.Number = 13 // ObjectMeta.ownerReferences
	finalizersField             protowire.Number = 14 // ObjectMeta.finalizers
	listMetaField               protowire.Number = 1  // <Kind>List.metadata
	listItemsField              protowire.Number = 2  // <Kind>List.items
)

// tailSize is the size of the envelope's last two fields, empty.
const tailSize = 4

// Object is a stored value parsed for splicing. It refers to the stored
// bytes, which must not change while it is used.
type Object struct {
	// raw is the object's message.
	raw []byte
	// raw[metaTag:metaStart] is ObjectMeta's tag and length,
	// raw[metaStart:metaEnd] its message.
	metaTag, metaStart, metaEnd int
	// raw[rvStart:rvEnd] is the resourceVersion field (tag, length, value)
	// the splice replaces; rvStart == rvEnd where the field is missing and
	// goes in.
	rvStart, rvEnd int
}

// Parse parses a stored value of kind gvk. It returns ErrNotSpliceable
// (wrapped) when the value is not the plain stored form of that kind.
//
// What decoding then encoding would change, and the splice does not, is
// only what it drops: fields unknown to the compiled-in k8s.io/api types.
// The stored bytes hold none while the same types write and read them.
func Parse(value []byte, gvk schema.GroupVersionKind) (Object, error) {
	if !bytes.HasPrefix(value, envelopePrefix) {
		return Object{}, fmt.Errorf("%w: no protobuf envelope", ErrNotSpliceable)
	}
	var (
		tm, raw      []byte
		seenTM, seen bool
	)
	err := walk(value[len(envelopePrefix):], func(num protowire.Number, typ protowire.Type, v []byte, _, _ int) error {
		switch num {
		case unknownTypeMetaField:
			if typ != protowire.BytesType || seenTM {
				return fmt.Errorf("%w: envelope type meta", ErrNotSpliceable)
			}
			tm, seenTM = v, true
		case unknownRawField:
			if typ != protowire.BytesType || seen {
				return fmt.Errorf("%w: envelope raw", ErrNotSpliceable)
			}
			raw, seen = v, true
		case unknownContentEncodingField, unknownContentTypeField:
			// A content encoding or type names another form of raw
			// (the stored form has neither).
			if typ != protowire.BytesType || len(v) != 0 {
				return fmt.Errorf("%w: envelope content encoding or type", ErrNotSpliceable)
			}
		}
		return nil
	})
	if err != nil {
		return Object{}, err
	}
	if !seen {
		return Object{}, fmt.Errorf("%w: envelope without raw", ErrNotSpliceable)
	}
	if err := checkTypeMeta(tm, gvk); err != nil {
		return Object{}, err
	}
	o := Object{raw: raw, metaTag: -1}
	err = walk(raw, func(num protowire.Number, typ protowire.Type, v []byte, tag, end int) error {
		if num != objectMetaField {
			return nil
		}
		// A repeated embedded message is merged by decoders: splicing
		// only one of them would not be what they read.
		if typ != protowire.BytesType || o.metaTag >= 0 {
			return fmt.Errorf("%w: object metadata", ErrNotSpliceable)
		}
		o.metaTag, o.metaStart, o.metaEnd = tag, end-len(v), end
		return nil
	})
	if err != nil {
		return Object{}, err
	}
	if o.metaTag < 0 {
		return Object{}, fmt.Errorf("%w: object without metadata", ErrNotSpliceable)
	}
	o.rvStart = -1
	insert := -1
	err = walk(raw[o.metaStart:o.metaEnd], func(num protowire.Number, typ protowire.Type, _ []byte, tag, end int) error {
		switch {
		case num == resourceVersionField:
			if typ != protowire.BytesType || o.rvStart >= 0 {
				return fmt.Errorf("%w: metadata.resourceVersion", ErrNotSpliceable)
			}
			o.rvStart, o.rvEnd = o.metaStart+tag, o.metaStart+end
		case num > resourceVersionField && insert < 0:
			insert = o.metaStart + tag
		}
		return nil
	})
	if err != nil {
		return Object{}, err
	}
	if o.rvStart < 0 {
		// The marshalers write every string, so the field is always
		// there; should it not be, it goes where they would put it.
		if insert < 0 {
			insert = o.metaEnd
		}
		o.rvStart, o.rvEnd = insert, insert
	}
	return o, nil
}

// checkTypeMeta checks that an envelope's TypeMeta names gvk: a value of
// another kind decodes into another type (or not at all).
func checkTypeMeta(tm []byte, gvk schema.GroupVersionKind) error {
	var apiVersion, kind []byte
	err := walk(tm, func(num protowire.Number, typ protowire.Type, v []byte, _, _ int) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case typeMetaAPIVersionField:
			apiVersion = v
		case typeMetaKindField:
			kind = v
		}
		return nil
	})
	if err != nil {
		return err
	}
	if string(apiVersion) != gvk.GroupVersion().String() || string(kind) != gvk.Kind {
		return fmt.Errorf("%w: stored %s %s, want %s", ErrNotSpliceable, apiVersion, kind, gvk)
	}
	return nil
}

// walk calls fn for each field of msg with its number, wire type, value
// (the contents of a length-delimited field; nil for the others) and the
// offsets in msg of the field's tag and of its end.
func walk(msg []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, tag, end int) error) error {
	for off := 0; off < len(msg); {
		num, typ, n := protowire.ConsumeTag(msg[off:])
		if n < 0 {
			return fmt.Errorf("%w: %w", ErrNotSpliceable, protowire.ParseError(n))
		}
		var v []byte
		var m int
		if typ == protowire.BytesType {
			v, m = protowire.ConsumeBytes(msg[off+n:])
		} else {
			m = protowire.ConsumeFieldValue(num, typ, msg[off+n:])
		}
		if m < 0 {
			return fmt.Errorf("%w: %w", ErrNotSpliceable, protowire.ParseError(m))
		}
		if err := fn(num, typ, v, off, off+n+m); err != nil {
			return err
		}
		off += n + m
	}
	return nil
}

// Metadata returns the object's name, namespace and labels, read from its
// ObjectMeta without decoding the rest, for selectors. As decoders do, the
// last of a repeated name, namespace or label key wins.
func (o *Object) Metadata() (name, namespace string, labels map[string]string, err error) {
	err = walk(o.raw[o.metaStart:o.metaEnd], func(num protowire.Number, typ protowire.Type, v []byte, _, _ int) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case nameField:
			name = string(v)
		case namespaceField:
			namespace = string(v)
		case labelsField:
			var key, value []byte
			if err := walk(v, func(num protowire.Number, typ protowire.Type, v []byte, _, _ int) error {
				if typ == protowire.BytesType && num == 1 {
					key = v
				} else if typ == protowire.BytesType && num == 2 {
					value = v
				}
				return nil
			}); err != nil {
				return err
			}
			if labels == nil {
				labels = map[string]string{}
			}
			labels[string(key)] = string(value)
		}
		return nil
	})
	return name, namespace, labels, err
}

// Meta is the part of an object's metadata that a reader of every write
// (the garbage collector) needs: identity, deletion state and owners.
type Meta struct {
	Name      string
	Namespace string
	UID       types.UID
	// Deleting is true when metadata.deletionTimestamp is set.
	Deleting        bool
	Finalizers      []string
	OwnerReferences []metav1.OwnerReference
}

// Meta reads Meta from the object's ObjectMeta without decoding the rest
// (managed fields, labels, annotations, the body), a small fraction of the
// cost of decoding the object.
func (o *Object) Meta() (Meta, error) {
	var m Meta
	err := walk(o.raw[o.metaStart:o.metaEnd], func(num protowire.Number, typ protowire.Type, v []byte, _, _ int) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case nameField:
			m.Name = string(v)
		case namespaceField:
			m.Namespace = string(v)
		case uidField:
			m.UID = types.UID(v)
		case deletionTimestampField:
			m.Deleting = true
		case finalizersField:
			m.Finalizers = append(m.Finalizers, string(v))
		case ownerReferencesField:
			var ref metav1.OwnerReference
			if err := ref.Unmarshal(v); err != nil {
				return fmt.Errorf("%w: owner reference: %w", ErrNotSpliceable, err)
			}
			m.OwnerReferences = append(m.OwnerReferences, ref)
		}
		return nil
	})
	return m, err
}

// metaSize is the size of the ObjectMeta message with a resourceVersion
// of rvLen bytes.
func (o *Object) metaSize(rvLen int) int {
	return o.metaEnd - o.metaStart - (o.rvEnd - o.rvStart) + protowire.SizeTag(resourceVersionField) + protowire.SizeBytes(rvLen)
}

// size is the size of the object's message with an ObjectMeta of
// metaSize bytes.
func (o *Object) size(metaSize int) int {
	return len(o.raw) - (o.metaEnd - o.metaTag) + protowire.SizeTag(objectMetaField) + protowire.SizeBytes(metaSize)
}

// appendTo appends the object's message with resourceVersion rv, whose
// ObjectMeta is then metaSize bytes.
//
// The resourceVersion field is rewritten in place rather than appended to
// ObjectMeta (which decoders would also read as the value, the last one
// winning): in place, the bytes are what the marshalers write for the
// decoded object, so a spliced list can be checked against a decoded and
// re-encoded one byte for byte. It costs the same: ObjectMeta's length
// changes either way, so its prefix is rewritten in both.
func (o *Object) appendTo(dst, rv []byte, metaSize int) []byte {
	dst = append(dst, o.raw[:o.metaTag]...)
	dst = protowire.AppendTag(dst, objectMetaField, protowire.BytesType)
	dst = protowire.AppendVarint(dst, uint64(metaSize))
	dst = append(dst, o.raw[o.metaStart:o.rvStart]...)
	dst = protowire.AppendTag(dst, resourceVersionField, protowire.BytesType)
	dst = protowire.AppendBytes(dst, rv)
	dst = append(dst, o.raw[o.rvEnd:o.metaEnd]...)
	return append(dst, o.raw[o.metaEnd:]...)
}

// Writer lays out a protobuf list: items are appended to chunks of about
// chunkSize bytes as they come, and Finish returns the head — envelope,
// ListMeta and the length prefixes, which depend on the whole list — to
// write before them. The protobuf envelope puts the list's length before
// its first item, so nothing can be sent before the last item is known.
//
// A Writer is not safe for concurrent use.
type Writer struct {
	listGVK   schema.GroupVersionKind
	chunkSize int
	chunks    [][]byte
	// itemsSize is the size of the items so far, tags and lengths included.
	itemsSize int
	count     int
}

// NewWriter returns a Writer of a list of kind listGVK (e.g. v1
// ConfigMapList) that gathers items into chunks of about chunkSize bytes
// (at least one item each).
func NewWriter(listGVK schema.GroupVersionKind, chunkSize int) *Writer {
	return &Writer{listGVK: listGVK, chunkSize: chunkSize}
}

// Add appends an item: o with resourceVersion modRevision.
func (w *Writer) Add(o *Object, modRevision int64) {
	n := ItemSize(o, modRevision)
	last := len(w.chunks) - 1
	if last < 0 || len(w.chunks[last])+n > cap(w.chunks[last])-tailSize {
		// A new chunk, sized so that appending (the tail included)
		// never copies.
		w.chunks = append(w.chunks, make([]byte, 0, max(w.chunkSize, n)+tailSize))
		last++
	}
	w.chunks[last] = AppendItem(w.chunks[last], o, modRevision)
	w.itemsSize += n
	w.count++
}

// ItemSize is the size of item o with resourceVersion modRevision in a
// list, its tag and length included: what AppendItem appends.
func ItemSize(o *Object, modRevision int64) int {
	var buf [20]byte
	size := o.size(o.metaSize(len(strconv.AppendInt(buf[:0], modRevision, 10))))
	return protowire.SizeTag(listItemsField) + protowire.SizeBytes(size)
}

// AppendItem appends item o with resourceVersion modRevision of a list to
// dst, as Writer.Add lays it out.
//
// With AppendHead and AppendTail a list can be written in two passes
// without a Writer: sum the ItemSize of every item, append the head, then
// the items and the tail, in as many pieces as the caller likes (a
// buffer reused for each chunk of a streamed list) — byte for byte what a
// Writer gives.
func AppendItem(dst []byte, o *Object, modRevision int64) []byte {
	var buf [20]byte
	rv := strconv.AppendInt(buf[:0], modRevision, 10)
	ms := o.metaSize(len(rv))
	dst = protowire.AppendTag(dst, listItemsField, protowire.BytesType)
	dst = protowire.AppendVarint(dst, uint64(o.size(ms)))
	return o.appendTo(dst, rv, ms)
}

// AppendHead appends the head of a list of kind listGVK with metadata lm
// whose items take itemsSize bytes (the sum of their ItemSize): what
// Writer.Finish returns first.
func AppendHead(dst []byte, listGVK schema.GroupVersionKind, lm *metav1.ListMeta, itemsSize int) ([]byte, error) {
	meta, err := lm.Marshal()
	if err != nil {
		return nil, fmt.Errorf("protolist: list metadata: %w", err)
	}
	apiVersion, kind := listGVK.GroupVersion().String(), listGVK.Kind
	tmSize := typeMetaSize(apiVersion, kind)
	listSize := protowire.SizeTag(listMetaField) + protowire.SizeBytes(len(meta)) + itemsSize
	dst = appendEnvelopeHead(dst, apiVersion, kind, tmSize, listSize)
	dst = protowire.AppendTag(dst, listMetaField, protowire.BytesType)
	return protowire.AppendBytes(dst, meta), nil
}

// TailSize is the size of what AppendTail appends.
const TailSize = tailSize

// AppendTail appends what ends a list after its last item.
func AppendTail(dst []byte) []byte { return appendEnvelopeTail(dst) }

// Len returns the number of items added.
func (w *Writer) Len() int { return w.count }

// Finish completes the list with its ListMeta and returns the whole
// response in order: the head, then the chunks of items, the last of them
// ending with the envelope's remaining fields. The Writer must not be used
// afterwards.
func (w *Writer) Finish(lm *metav1.ListMeta) ([][]byte, error) {
	head, err := AppendHead(nil, w.listGVK, lm, w.itemsSize)
	if err != nil {
		return nil, err
	}
	out := append([][]byte{head}, w.chunks...)
	out[len(out)-1] = appendEnvelopeTail(out[len(out)-1])
	w.chunks = nil
	return out, nil
}

// typeMetaSize is the size of the envelope's TypeMeta message.
func typeMetaSize(apiVersion, kind string) int {
	return protowire.SizeTag(typeMetaAPIVersionField) + protowire.SizeBytes(len(apiVersion)) +
		protowire.SizeTag(typeMetaKindField) + protowire.SizeBytes(len(kind))
}

// appendEnvelopeHead appends what precedes the raw message of an
// envelope: the prefix, TypeMeta (of tmSize bytes) and raw's tag and
// length.
func appendEnvelopeHead(dst []byte, apiVersion, kind string, tmSize, rawSize int) []byte {
	dst = append(dst, envelopePrefix...)
	dst = protowire.AppendTag(dst, unknownTypeMetaField, protowire.BytesType)
	dst = protowire.AppendVarint(dst, uint64(tmSize))
	dst = protowire.AppendTag(dst, typeMetaAPIVersionField, protowire.BytesType)
	dst = protowire.AppendString(dst, apiVersion)
	dst = protowire.AppendTag(dst, typeMetaKindField, protowire.BytesType)
	dst = protowire.AppendString(dst, kind)
	dst = protowire.AppendTag(dst, unknownRawField, protowire.BytesType)
	return protowire.AppendVarint(dst, uint64(rawSize))
}

// appendEnvelopeTail appends the envelope's contentEncoding and
// contentType, empty, as the marshaler writes them (tailSize bytes).
func appendEnvelopeTail(dst []byte) []byte {
	dst = protowire.AppendTag(dst, unknownContentEncodingField, protowire.BytesType)
	dst = protowire.AppendString(dst, "")
	dst = protowire.AppendTag(dst, unknownContentTypeField, protowire.BytesType)
	return protowire.AppendString(dst, "")
}

// Envelope is an object's protobuf envelope with a resourceVersion —
// byte for byte what decoding the stored value and encoding the object
// with the protobuf serializer give — sized once, so that it can be
// written wherever it goes (the object of a watch frame, straight into a
// batch being sent; a Get's response) without decoding. It refers to the
// Object, and so to the stored bytes.
type Envelope struct {
	o                *Object
	apiVersion, kind string
	rev              int64
	// The sizes of TypeMeta, ObjectMeta, the object's message and the
	// whole (int32: an envelope is made per frame).
	tmSize, metaSize, rawSize, size int32
}

// Envelope returns the object's envelope with resourceVersion modRevision
// (> 0) and the TypeMeta apiVersion and kind (those of the kind Parse was
// given).
func (o *Object) Envelope(apiVersion, kind string, modRevision int64) Envelope {
	var buf [20]byte
	rvLen := len(strconv.AppendInt(buf[:0], modRevision, 10))
	tmSize := typeMetaSize(apiVersion, kind)
	metaSize := o.metaSize(rvLen)
	rawSize := o.size(metaSize)
	size := len(envelopePrefix) + protowire.SizeTag(unknownTypeMetaField) + protowire.SizeBytes(tmSize) +
		protowire.SizeTag(unknownRawField) + protowire.SizeBytes(rawSize) + tailSize
	return Envelope{o: o, apiVersion: apiVersion, kind: kind, rev: modRevision,
		tmSize: int32(tmSize), metaSize: int32(metaSize), rawSize: int32(rawSize), size: int32(size)}
}

// Size is the size of the envelope: what AppendTo appends.
func (e *Envelope) Size() int { return int(e.size) }

// AppendTo appends the envelope to dst.
func (e *Envelope) AppendTo(dst []byte) []byte {
	var buf [20]byte
	rv := strconv.AppendInt(buf[:0], e.rev, 10)
	dst = appendEnvelopeHead(dst, e.apiVersion, e.kind, int(e.tmSize), int(e.rawSize))
	dst = e.o.appendTo(dst, rv, int(e.metaSize))
	return appendEnvelopeTail(dst)
}
