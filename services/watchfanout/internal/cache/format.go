package cache

import (
	"time"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/kube/watchframe"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// Format is one wire format of frames. Each event memoizes one encoding
// per (Format, FrameKind), so N watchers of one format cost one encode.
type Format uint8

// The formats served.
const (
	FormatJSON Format = iota
	FormatProtobuf
	FormatTableNone
	FormatTableMetadata
	FormatTableObject
	numFormats
)

// Watchframe returns the watchframe format of f.
func (f Format) Watchframe() watchframe.Format {
	switch f {
	case FormatProtobuf:
		return watchframe.Format{MediaType: negotiation.Protobuf}
	case FormatTableNone:
		return watchframe.Format{MediaType: negotiation.JSON, Table: true, IncludeObject: metav1.IncludeNone}
	case FormatTableMetadata:
		return watchframe.Format{MediaType: negotiation.JSON, Table: true, IncludeObject: metav1.IncludeMetadata}
	case FormatTableObject:
		return watchframe.Format{MediaType: negotiation.JSON, Table: true, IncludeObject: metav1.IncludeObject}
	}
	return watchframe.Format{MediaType: negotiation.JSON}
}

// FrameKind is which watch event an Event becomes for one watcher.
type FrameKind uint8

// The kinds of frames.
const (
	// FrameAdded is ADDED with the event's object (a create, an object
	// entering a watcher's selectors, or an initial event).
	FrameAdded FrameKind = iota
	// FrameModified is MODIFIED with the event's object.
	FrameModified
	// FrameDeleted is DELETED with the event's object (for a delete, the
	// last state at the delete's revision).
	FrameDeleted
	// FrameDeletedPrev is DELETED with the previous state at the event's
	// revision: the object left the watcher's selectors (as kube-apiserver
	// reports it).
	FrameDeletedPrev
	// FrameBookmark is BOOKMARK.
	FrameBookmark
	numKinds
)

func (k FrameKind) eventType() watch.EventType {
	switch k {
	case FrameAdded:
		return watch.Added
	case FrameModified:
		return watch.Modified
	case FrameDeleted, FrameDeletedPrev:
		return watch.Deleted
	}
	return watch.Bookmark
}

// encoders is what the events of one resource share: a watchframe
// encoder per format, and what decoding and splicing their stored objects
// need. It is immutable.
type encoders struct {
	f     [numFormats]*watchframe.Encoder
	codec *codec.Codec
	res   *registry.Resource
	// apiVersion and kind are the TypeMeta of the resource's objects in
	// their protobuf envelopes.
	apiVersion, kind string
}

func newEncoders(c *codec.Codec, res *registry.Resource, now func() time.Time) *encoders {
	e := &encoders{codec: c, res: res, apiVersion: res.GVK().GroupVersion().String(), kind: res.Kind}
	for f := Format(0); f < numFormats; f++ {
		e.f[f] = watchframe.NewEncoder(c, res, f.Watchframe(), now)
	}
	return e
}
