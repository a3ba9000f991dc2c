package server

import (
	"context"
	"errors"
	"hash/maphash"
	"slices"

	"github.com/meridian-cp/meridian/lib/gzsplice"
	"github.com/meridian-cp/meridian/lib/kube/protolist"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/cache"
	"google.golang.org/grpc/metadata"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// A gzip-compressed list (the caller sent gzsplice.MetadataAccept) is
// one gzip stream sent in chunks. Its items are compressed in runs of
// consecutive objects, each run a deflate segment memoized on its first
// object (cache.Event.ListRun), so a list of unchanged objects costs
// copying their compressed bytes rather than compressing them again.
//
// A run starts at every object whose key hashes (with the server's seed)
// to a multiple of runSpacing and ends before the next such object: runs
// are the same whatever the list's first object (a whole list's, a
// chunk's), and adding or removing an object changes only the run it
// falls in. Objects
// compress against the others of their run (a list's objects share most
// of their keys and metadata); one object per segment would make the
// response six times as large (docs/benchmarks.md). The list's head, the
// JSON list's first item and the tail are compressed as the list is
// written.
//
// A JSON run holds `,<item>` for each of its items; a protobuf run its
// items' tags, lengths and bytes.

// runSpacing is the mean number of objects in a run.
const runSpacing = 32

// runStart reports whether a run starts at ev: the hash of its key under
// seed is a multiple of runSpacing.
func runStart(seed maphash.Seed, ev *cache.Event) bool {
	return maphash.String(seed, ev.Key)%runSpacing == 0
}

// runMatches reports whether r holds exactly evs' objects.
func runMatches(r *cache.ListRun, evs []*cache.Event) bool {
	if r == nil || len(r.Items) != len(evs) {
		return false
	}
	for i, ev := range evs {
		if r.Items[i].Rev != ev.Rev || r.Items[i].Key != ev.Key {
			return false
		}
	}
	return true
}

// acceptsGzip reports whether the caller of ctx's call takes its list
// gzip-compressed.
func acceptsGzip(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return slices.Contains(md.Get(gzsplice.MetadataAccept), "gzip")
}

// compressor returns a compressor from compressors.
func (s *Server) compressor() *gzsplice.Compressor {
	if c, ok := s.compressors.Get().(*gzsplice.Compressor); ok {
		return c
	}
	return gzsplice.NewCompressor()
}

// sendGzipList sends l gzip-compressed when the caller asked for it and
// the list is a JSON or protobuf list of objects of at least
// gzsplice.Threshold bytes; false, sending nothing, when it is not sent
// so.
func (s *Server) sendGzipList(stream watchv1.WatchService_StreamListServer, l *listed, send func([]byte) error) (bool, error) {
	if !acceptsGzip(stream.Context()) || l.page.items != nil || (l.f != cache.FormatJSON && l.f != cache.FormatProtobuf) {
		return false, nil
	}
	var itemsSize int
	if l.f == cache.FormatProtobuf {
		size, ok := protobufItemsSize(l.page.evs)
		if !ok || size < gzsplice.Threshold {
			return false, nil
		}
		itemsSize = size
	} else {
		// The stored sizes: the JSON is about as large or larger.
		size := 0
		for _, ev := range l.page.evs {
			size += ev.Size()
		}
		if size < gzsplice.Threshold {
			return false, nil
		}
	}
	if err := stream.SetHeader(metadata.Pairs(gzsplice.MetadataEncoding, "gzip")); err != nil {
		return true, err
	}
	c := s.compressor()
	defer s.compressors.Put(c)
	buf := s.listBuf()
	defer s.listBufs.Put(buf)
	w := gzipList{c: c, dst: (*buf)[:0], send: send, seed: s.runSeed}
	w.dst = w.st.AppendHeader(w.dst)
	var err error
	if l.f == cache.FormatProtobuf {
		err = w.protobuf(l, itemsSize)
	} else {
		err = s.gzipJSON(&w, l)
	}
	if err != nil {
		return true, err
	}
	return true, send(w.st.AppendTrailer(w.dst))
}

// gzipList is a gzip-compressed list being written into dst and sent in
// chunks of about streamChunkBytes.
type gzipList struct {
	c       *gzsplice.Compressor
	st      gzsplice.Stream
	dst     []byte
	item    []byte   // protobuf items' bytes before they are compressed
	parts   [][]byte // the parts of the items compressed together
	scratch []byte   // a segment before it is copied to its exact size
	seed    maphash.Seed
	send    func([]byte) error
}

// live compresses parts into the stream as they are written.
func (w *gzipList) live(parts ...[]byte) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	if err := w.room(n); err != nil {
		return err
	}
	w.dst = w.st.AppendLive(w.c, w.dst, parts...)
	return nil
}

// splice appends seg, a run's segment, to the stream.
func (w *gzipList) splice(seg []byte) error {
	if err := w.room(gzsplice.SegmentSize(seg)); err != nil {
		return err
	}
	var ok bool
	if w.dst, ok = w.st.AppendSegment(w.dst, seg); !ok {
		return apierrors.NewInternalError(errors.New("server: a list segment is too short"))
	}
	return nil
}

// room sends what dst holds when n more bytes would take it past
// streamChunkBytes.
func (w *gzipList) room(n int) error {
	if len(w.dst) == 0 || len(w.dst)+n <= streamChunkBytes {
		return nil
	}
	if err := w.send(w.dst); err != nil {
		return err
	}
	w.dst = w.dst[:0]
	return nil
}

// itemParts appends the parts of ev's item in the list to parts.
type itemParts func(parts [][]byte, ev *cache.Event) ([][]byte, error)

// items writes evs' items in runs, each spliced from the run memoized on
// its first object when that holds the same objects, else compressed
// and memoized. complete says evs end where the collection does; else
// the last run is cut by their end (a chunk's), and memoized apart from
// the whole run (cache.RunCut). The objects of a chunk before its first
// run start are a run of their own, memoized on the chunk's first
// object, where no whole list's run starts.
func (w *gzipList) items(f cache.Format, evs []*cache.Event, complete bool, item itemParts) error {
	for i := 0; i < len(evs); {
		j := i + 1
		for j < len(evs) && !runStart(w.seed, evs[j]) {
			j++
		}
		run := evs[i:j]
		slot := cache.RunWhole
		if j == len(evs) && !complete {
			slot = cache.RunCut
		}
		r := evs[i].ListRun(f, slot)
		if !runMatches(r, run) {
			var err error
			if r, err = w.newRun(run, item); err != nil {
				return err
			}
			evs[i].SetListRun(f, slot, r)
		}
		if err := w.splice(r.Segment); err != nil {
			return err
		}
		i = j
	}
	return nil
}

// newRun compresses evs' items into a new run.
func (w *gzipList) newRun(evs []*cache.Event, item itemParts) (*cache.ListRun, error) {
	w.item = w.item[:0]
	parts := w.parts[:0]
	r := &cache.ListRun{Items: make([]cache.RunItem, len(evs))}
	for i, ev := range evs {
		var err error
		if parts, err = item(parts, ev); err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		r.Items[i] = cache.RunItem{Key: ev.Key, Rev: ev.Rev}
	}
	w.parts = parts[:0]
	w.scratch = w.c.AppendSegment(w.scratch[:0], parts...)
	r.Segment = slices.Clone(w.scratch)
	return r, nil
}

// protobuf writes l's protobuf list, whose items take itemsSize bytes.
func (w *gzipList) protobuf(l *listed, itemsSize int) error {
	head, err := protolist.AppendHead(nil, l.res.GVK().GroupVersion().WithKind(l.res.ListKind), &l.lm, itemsSize)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if err := w.live(head); err != nil {
		return err
	}
	// Each item is appended to w.item (emptied at each run's start) and
	// its part points there: when appending moves w.item, the parts
	// before still point at the bytes they had.
	err = w.items(cache.FormatProtobuf, l.page.evs, l.lm.Continue == "", func(parts [][]byte, ev *cache.Event) ([][]byte, error) {
		po, _ := ev.Stored() // protobufItemsSize saw every one
		start := len(w.item)
		w.item = protolist.AppendItem(w.item, po, ev.Rev)
		return append(parts, w.item[start:]), nil
	})
	if err != nil {
		return err
	}
	return w.live(protolist.AppendTail(nil))
}

// gzipJSON writes l's JSON list.
func (s *Server) gzipJSON(w *gzipList, l *listed) error {
	jl, err := newJSONList(l.res, &l.lm)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	evs := l.page.evs
	if len(evs) == 0 {
		return w.live(jl.head, []byte("]}\n"))
	}
	first, err := s.listItemJSON(evs[0], jl.typeMeta, jl.custom)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	p := first.parts("")
	if err := w.live(jl.head, p[1], p[2]); err != nil {
		return err
	}
	err = w.items(cache.FormatJSON, evs[1:], l.lm.Continue == "", func(parts [][]byte, ev *cache.Event) ([][]byte, error) {
		x, err := s.listItemJSON(ev, jl.typeMeta, jl.custom)
		if err != nil {
			return nil, err
		}
		p := x.parts(",")
		return append(parts, p[0], p[1], p[2]), nil
	})
	if err != nil {
		return err
	}
	return w.live([]byte("]}\n"))
}
