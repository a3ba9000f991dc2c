package server

import (
	"github.com/meridian-cp/meridian/lib/kube/protolist"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/cache"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// streamChunkBytes is the most a StreamList message carries (unless one
// object is larger): just under 1 MiB, the size class of gRPC's buffer
// pool that a message of more than 32 KiB is encoded into and received
// into. The pool clears a buffer whole on each use, so a chunk that fills
// its buffer pays for no clearing beyond its own size. Large enough that a
// message's overhead is noise; gRPC's stream window (4 MiB) bounds what is
// in flight.
const streamChunkBytes = 1<<20 - 4<<10

// StreamList is List with the encoded list sent in chunks. A JSON list of
// the objects is written from their memoized JSON (cache.Event.ObjectJSON)
// and each chunk is sent as it fills, so neither watchfanout nor the gateway
// relaying it holds the whole list; a protobuf list of them is spliced from
// their stored bytes likewise, once the items' sizes are summed (the
// envelope holds the list's length before its first item); both are
// written chunk after chunk into one buffer reused from list to list.
// Other encodings are built whole, as List builds them, and sent in
// chunks. A caller that takes gzip (gzsplice.MetadataAccept) gets a JSON
// or protobuf list of gzsplice.Threshold bytes or more as one gzip
// stream spliced from compressed runs of objects (streamlistgzip.go),
// the response header gzsplice.MetadataEncoding saying so. The first message carries the
// list's resource_version, continue_token and remaining_item_count.
// Errors before the first message are Status errors as List's; after it,
// the stream ends with the error and the list is incomplete.
func (s *Server) StreamList(req *watchv1.StreamListRequest, stream watchv1.WatchService_StreamListServer) error {
	l, err := s.read(stream.Context(), req.GetList())
	if err != nil {
		return toGRPC(err)
	}
	first := true
	send := func(chunk []byte) error {
		msg := &watchv1.StreamListResponse{Data: chunk}
		if first {
			msg.ResourceVersion, msg.ContinueToken, msg.RemainingItemCount = l.lm.ResourceVersion, l.lm.Continue, l.lm.RemainingItemCount
			first = false
		}
		// Send has encoded msg when it returns: chunk may be reused.
		return stream.Send(msg)
	}
	if sent, err := s.sendGzipList(stream, l, send); sent {
		return toGRPC(err)
	}
	if l.f == cache.FormatProtobuf && l.page.items == nil {
		if size, ok := protobufItemsSize(l.page.evs); ok {
			buf := s.listBuf()
			defer s.listBufs.Put(buf)
			return toGRPC(sendProtobufList((*buf)[:0], l.res, l.page.evs, &l.lm, size, send))
		}
	}
	var rest []byte
	if l.f == cache.FormatJSON && l.page.items == nil {
		buf := s.listBuf()
		defer s.listBufs.Put(buf)
		rest, err = s.appendJSONList((*buf)[:0], l.res, l.page.evs, &l.lm, streamChunkBytes, send)
	} else {
		rest, err = s.encodeList(l.res, &l.page, &l.lm, l.f)
		for err == nil && len(rest) > streamChunkBytes {
			err = send(rest[:streamChunkBytes])
			rest = rest[streamChunkBytes:]
		}
	}
	if err != nil {
		return toGRPC(err)
	}
	return send(rest)
}

// listBuf returns a buffer of capacity streamChunkBytes from listBufs;
// every message sent from it has been encoded (or, in process, handled)
// once Send returns, so it goes back once the list is sent.
func (s *Server) listBuf() *[]byte {
	if b, ok := s.listBufs.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, streamChunkBytes)
	return &b
}

// protobufItemsSize is the size of evs' objects as protobuf list items
// (protolist.ItemSize), spliced from their stored bytes; false when one
// has no stored bytes to splice.
func protobufItemsSize(evs []*cache.Event) (int, bool) {
	size := 0
	for _, ev := range evs {
		po, ok := ev.Stored()
		if !ok {
			return 0, false
		}
		size += protolist.ItemSize(po, ev.Rev)
	}
	return size, true
}

// sendProtobufList sends the protobuf list of evs' objects (whose items
// take itemsSize bytes) with metadata lm in chunks of at most
// streamChunkBytes unless one item alone is larger, each written into
// dst from its start: spliced from the stored bytes, byte for byte what
// protobufListChunks gives joined, without holding the list.
func sendProtobufList(dst []byte, res *registry.Resource, evs []*cache.Event, lm *metav1.ListMeta, itemsSize int, send func([]byte) error) error {
	dst, err := protolist.AppendHead(dst, res.GVK().GroupVersion().WithKind(res.ListKind), lm, itemsSize)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	for _, ev := range evs {
		po, _ := ev.Stored() // protobufItemsSize saw every one
		if n := protolist.ItemSize(po, ev.Rev); len(dst) > 0 && len(dst)+n+protolist.TailSize > streamChunkBytes {
			if err := send(dst); err != nil {
				return err
			}
			dst = dst[:0]
		}
		dst = protolist.AppendItem(dst, po, ev.Rev)
	}
	return send(protolist.AppendTail(dst))
}
