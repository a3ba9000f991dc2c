package resources

import (
	"context"
	"sync"

	"github.com/meridian-cp/meridian/lib/kube/apistatus"
	"github.com/meridian-cp/meridian/lib/kube/crdconvert"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/kube/selection"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// scanResult is where a scan of a collection stopped.
type scanResult struct {
	// rev is the revision every page was read at.
	rev int64
	// next is the key to continue from; empty when the collection ended.
	next string
	// remaining counts the keys after next, when no selector filtered
	// (a count of keys is then a count of objects).
	remaining *int64
}

// scan reads the keys under prefix page by page — at most pageSize at a
// time (0: as many as limit asks for, all at once without one), all pages
// at the revision of the first, so the objects form one snapshot — decodes
// each object, and hands those the filter selects to yield, until limit
// objects were handed over (0: all of them). Paging bounds what a
// streaming caller holds; a caller that keeps every object anyway reads
// in one go.
//
// first is the read of the first page (its Limit is ignored); minRV, when
// positive, is the revision that page must have reached (504 otherwise).
// read performs a page's read and maps its errors. Lists, streamed lists
// and the initial state of watches all read collections this way.
func (s *Server) scan(ctx context.Context, res *registry.Resource, filter *selection.Filter, first storage.ListOptions, minRV, limit, pageSize int64,
	read func(context.Context, storage.ListOptions) (storage.ListResult, error), yield func(runtime.Object) error) (scanResult, error) {
	var pages *convertedPages
	if needsConversion(res) && crdconvert.NeedsWebhook(res.Custom.CRD) {
		pages = &convertedPages{objs: map[string]runtime.Object{}}
		read = s.convertingRead(res, read, pages)
	}
	return scanKVs(ctx, filter.Empty(), first, minRV, limit, pageSize, read, func(kv storage.KV) (bool, error) {
		obj, ok := pages.take(kv.Key)
		if !ok {
			var err error
			if obj, err = s.decodeRead(ctx, res, kv.Value, kv.ModRevision); err != nil {
				return false, err
			}
		}
		if !filter.Matches(obj) {
			return false, nil
		}
		return true, yield(obj)
	})
}

// scanKVs is scan's paging over the stored values themselves: yield gets
// every key read and reports whether it selected it (only selected keys
// count toward limit). selectsAll says that yield selects every key, which
// makes the count of keys left after a page the remainingItemCount.
//
// Only a page that can end the list at limit asks the store for that count
// (storage.ListOptions.SkipCount): counting costs the store a walk over the
// rest of the range, which every page of a long list would pay again.
//
// With a limit and a filter that drops keys, pages grow: each page after
// one the filter left short is twice the size of the last, up to pageSize
// (or maxFilteredPage without one), as kube-apiserver doubles its etcd
// reads. Sized to what is left of the limit, a selective list read one
// key per round trip (a limit=1 list whose selector matched nothing took
// 3 s over 10,000 objects). A page may then hold more selected keys than
// the limit takes: the list stops at the limit's last, and continues
// after it.
//
// Reading the whole collection (no limit, pageSize > 0), the next page is
// read while yield handles the current one, so that the store's reading
// and the caller's decoding and encoding overlap: at most two pages are
// held. A page read ahead is not used when yield fails.
func scanKVs(ctx context.Context, selectsAll bool, first storage.ListOptions, minRV, limit, pageSize int64,
	read func(context.Context, storage.ListOptions) (storage.ListResult, error), yield func(storage.KV) (bool, error)) (scanResult, error) {
	var out scanResult
	opts := first
	var count int64
	// grown is the size of the last filtered page, which the next doubles.
	var grown int64
	// sized sets the next page's size, and asks for the count of the keys
	// after it only when it can end the list at limit.
	sized := func(o storage.ListOptions) storage.ListOptions {
		o.Limit = pageSize
		if limit > 0 && (pageSize == 0 || limit-count < pageSize) {
			o.Limit = limit - count
		}
		if limit > 0 && !selectsAll {
			ceiling := pageSize
			if ceiling == 0 {
				ceiling = maxFilteredPage
			}
			grown = max(o.Limit, min(2*grown, ceiling))
			o.Limit = grown
		}
		o.SkipCount = !(selectsAll && limit > 0 && o.Limit == limit-count)
		return o
	}
	readAhead := limit == 0 && pageSize > 0
	var ahead chan pageRead
	for firstPage := true; ; firstPage = false {
		var page storage.ListResult
		var err error
		if ahead != nil {
			r := <-ahead
			page, err, ahead = r.page, r.err, nil
		} else {
			page, err = read(ctx, sized(opts))
		}
		if err != nil {
			return out, err
		}
		if firstPage {
			if minRV > 0 && page.Revision < minRV {
				return out, apistatus.TooLargeResourceVersion(minRV, page.Revision)
			}
			out.rev = page.Revision
		}
		more := page.More && len(page.KVs) > 0
		if more {
			// The next page starts at the key after this page's last, at
			// the same revision.
			out.next = page.KVs[len(page.KVs)-1].Key + "\x00"
			opts = storage.ListOptions{ReadOptions: storage.ReadOptions{Revision: out.rev, Serializable: true}, Start: out.next}
			if readAhead {
				ahead = readPage(ctx, read, sized(opts))
			}
		}
		for i, kv := range page.KVs {
			selected, err := yield(kv)
			if err != nil {
				return out, err
			}
			if selected {
				count++
			}
			if limit > 0 && count >= limit && i < len(page.KVs)-1 {
				// A filtered page larger than what the limit had left:
				// stop at the limit's last key (the rest of the page is
				// read again by the next list).
				out.next = kv.Key + "\x00"
				return out, nil
			}
		}
		if !more {
			out.next = ""
			return out, nil
		}
		if limit > 0 && count >= limit {
			if selectsAll {
				r := page.Count - int64(len(page.KVs))
				out.remaining = &r
			}
			return out, nil
		}
	}
}

// maxFilteredPage bounds the growth of filtered pages without a page size
// (kube-apiserver's maxLimit for the same doubling).
const maxFilteredPage = 10000

// pageRead is the result of a page read ahead.
type pageRead struct {
	page storage.ListResult
	err  error
}

// readPage reads one page in the background; the channel delivers it.
func readPage(ctx context.Context, read func(context.Context, storage.ListOptions) (storage.ListResult, error), opts storage.ListOptions) chan pageRead {
	ch := make(chan pageRead, 1) // the reader never blocks, used or not
	go func() {
		page, err := read(ctx, opts)
		ch <- pageRead{page, err}
	}()
	return ch
}

// convertedPages holds the objects of the pages a scan read, converted
// by convertingRead, until the scan takes them; a page read ahead is
// filled while the current one is taken, so it is locked.
type convertedPages struct {
	mu   sync.Mutex
	objs map[string]runtime.Object
}

// take removes and returns the converted object of key; false when there
// is none (or p is nil).
func (p *convertedPages) take(key string) (runtime.Object, bool) {
	if p == nil {
		return nil, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	obj, ok := p.objs[key]
	delete(p.objs, key)
	return obj, ok
}

// convertingRead wraps a scan's page read so that the objects of each
// page are decoded and converted to res's version in one conversion
// webhook call, as kube-apiserver converts a list, instead of one call
// per object; a failed conversion fails the read (a 500).
func (s *Server) convertingRead(res *registry.Resource, read func(context.Context, storage.ListOptions) (storage.ListResult, error), pages *convertedPages) func(context.Context, storage.ListOptions) (storage.ListResult, error) {
	return func(ctx context.Context, o storage.ListOptions) (storage.ListResult, error) {
		page, err := read(ctx, o)
		if err != nil {
			return page, err
		}
		objs := make([]*unstructured.Unstructured, len(page.KVs))
		for i, kv := range page.KVs {
			if objs[i], err = s.decodeAsStored(res, kv.Value, kv.ModRevision); err != nil {
				return page, err
			}
		}
		if err := s.convertObjects(ctx, res, objs, res.Custom.Version); err != nil {
			return page, err
		}
		pages.mu.Lock()
		defer pages.mu.Unlock()
		for i, kv := range page.KVs {
			res.DefaultOnRead(objs[i])
			pages.objs[kv.Key] = objs[i]
		}
		return page, nil
	}
}
