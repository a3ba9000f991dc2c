package server

import (
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/cache"
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
// their stored bytes into chunks that are sent as they are (never joined
// into one buffer); other encodings are built whole, as List builds them,
// and sent in chunks. The first message carries the
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
	if l.f == cache.FormatProtobuf && l.page.items == nil {
		chunks, ok, err := protobufListChunks(l.res, &l.page, &l.lm, streamChunkBytes)
		for i := 0; ok && err == nil && i < len(chunks); i++ {
			err = send(chunks[i])
		}
		if ok || err != nil {
			return toGRPC(err)
		}
	}
	var rest []byte
	if l.f == cache.FormatJSON && l.page.items == nil {
		rest, err = s.appendJSONList(make([]byte, 0, streamChunkBytes), l.res, l.page.evs, &l.lm, streamChunkBytes, send)
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
