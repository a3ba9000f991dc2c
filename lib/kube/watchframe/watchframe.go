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
	"encoding/binary"
	"fmt"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/metaonly"
	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/kube/table"
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
func (e *Encoder) Frame(t watch.EventType, obj runtime.Object) ([]byte, error) {
	var raw []byte
	var err error
	if e.format.Table && (t == watch.Added || t == watch.Modified || t == watch.Deleted) {
		tbl, terr := table.Render(e.codec, e.res, obj, e.format.IncludeObject, e.now())
		if terr != nil {
			return nil, terr
		}
		raw, err = e.codec.EncodeToBytes(tbl, negotiation.JSON)
	} else if e.format.Partial && (t == watch.Added || t == watch.Modified || t == watch.Deleted) {
		p, perr := metaonly.Object(obj)
		if perr != nil {
			return nil, perr
		}
		raw, err = e.codec.EncodeToBytes(p, e.format.MediaType)
	} else {
		raw, err = e.codec.EncodeToBytes(obj, e.format.MediaType)
	}
	if err != nil {
		return nil, fmt.Errorf("watchframe: %w", err)
	}
	ev := &metav1.WatchEvent{Type: string(t), Object: runtime.RawExtension{Raw: raw}}
	if e.format.MediaType == negotiation.Protobuf {
		data, err := ev.Marshal()
		if err != nil {
			return nil, fmt.Errorf("watchframe: %w", err)
		}
		out := make([]byte, 4, 4+len(data))
		binary.BigEndian.PutUint32(out, uint32(len(data)))
		return append(out, data...), nil
	}
	data, err := e.codec.EncodeToBytes(ev, negotiation.JSON)
	if err != nil {
		return nil, fmt.Errorf("watchframe: %w", err)
	}
	if n := len(data); n > 0 && data[n-1] != '\n' {
		data = append(data, '\n')
	}
	return data, nil
}
