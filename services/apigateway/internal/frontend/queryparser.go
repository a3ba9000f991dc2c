package frontend

import (
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"google.golang.org/protobuf/proto"
)

// queryParser fills the requests of the hottest routes, get, list and the
// writes (create, update, patch), from the query the front end built
// (rewrite), by name; every other message, and any query those fills do
// not fully understand, goes to grpc-gateway's DefaultQueryParser, so
// results and errors are the default's. The default finds each field by
// reflection and matches every key against a regular expression, work
// that every request of these routes would otherwise pay for.
type queryParser struct {
	fallback runtime.DefaultQueryParser
}

// useQueryParser installs queryParser. grpc-gateway keeps the query parser
// in a package variable, written by the mux option and read by every
// request of every mux; writing it once, before any mux of ours serves,
// keeps the writes from racing with those reads. The parser is the
// default's behaviour made faster, so a mux elsewhere in the process sees
// no difference.
var useQueryParser = sync.OnceValue(func() runtime.ServeMuxOption {
	return runtime.SetQueryParameterParser(queryParser{})
})

// Parse implements runtime.QueryParameterParser.
func (p queryParser) Parse(msg proto.Message, values url.Values, filter *utilities.DoubleArray) error {
	switch m := msg.(type) {
	case *apiv1.GetRequest:
		if fillGet(m, values) {
			return nil
		}
	case *apiv1.ListRequest:
		if fillList(m, values) {
			return nil
		}
	case *apiv1.CreateRequest:
		if w, ok := fillWrite(values, false); ok {
			m.Ref, m.DryRun, m.FieldManager, m.FieldValidation, m.Accept = w.ref, w.dryRun, w.fieldManager, w.fieldValidation, w.accept
			return nil
		}
	case *apiv1.UpdateRequest:
		if w, ok := fillWrite(values, false); ok {
			m.Ref, m.DryRun, m.FieldManager, m.FieldValidation, m.Accept = w.ref, w.dryRun, w.fieldManager, w.fieldValidation, w.accept
			return nil
		}
	case *apiv1.PatchRequest:
		if w, ok := fillWrite(values, true); ok {
			m.Ref, m.DryRun, m.FieldManager, m.FieldValidation, m.Accept = w.ref, w.dryRun, w.fieldManager, w.fieldValidation, w.accept
			m.Force = w.force
			return nil
		}
	}
	return p.fallback.Parse(msg, values, filter)
}

// fillGet sets m from values when every key is a field of GetRequest with
// one value; otherwise it leaves m unchanged and returns false.
func fillGet(m *apiv1.GetRequest, values url.Values) bool {
	var rv, accept, include string
	ref, ok := fillFrom(values, func(k, v string) bool {
		switch k {
		case "resourceVersion", "resource_version":
			rv = v
		case "accept":
			accept = v
		case "includeObject", "include_object":
			include = v
		default:
			return false
		}
		return true
	})
	if ok {
		m.Ref, m.ResourceVersion, m.Accept, m.IncludeObject = ref, rv, accept, include
	}
	return ok
}

// fillList is fillGet for ListRequest.
func fillList(m *apiv1.ListRequest, values url.Values) bool {
	var r struct{ labels, fields, rv, rvMatch, cont, accept, include string }
	var limit int64
	ref, ok := fillFrom(values, func(k, v string) bool {
		switch k {
		case "labelSelector", "label_selector":
			r.labels = v
		case "fieldSelector", "field_selector":
			r.fields = v
		case "resourceVersion", "resource_version":
			r.rv = v
		case "resourceVersionMatch", "resource_version_match":
			r.rvMatch = v
		case "limit":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return false // the default parser words the error
			}
			limit = n
		case "continue", "continue_token":
			r.cont = v
		case "accept":
			r.accept = v
		case "includeObject", "include_object":
			r.include = v
		default:
			return false
		}
		return true
	})
	if ok {
		m.Ref, m.LabelSelector, m.FieldSelector = ref, r.labels, r.fields
		m.ResourceVersion, m.ResourceVersionMatch, m.Limit = r.rv, r.rvMatch, limit
		m.ContinueToken, m.Accept, m.IncludeObject = r.cont, r.accept, r.include
	}
	return ok
}

// writeQuery is the query of a create, update or patch.
type writeQuery struct {
	ref                                   *apiv1.ResourceRef
	dryRun                                []string
	fieldManager, fieldValidation, accept string
	force                                 *bool
}

// fillWrite reads the query of a write; force is a field of patches only.
// Like fillGet it declines (false) whatever it does not fully understand.
func fillWrite(values url.Values, patch bool) (writeQuery, bool) {
	var w writeQuery
	ref, ok := fillFrom(values, func(k, v string) bool {
		switch k {
		case "dryRun", "dry_run":
			w.dryRun = []string{v}
		case "fieldManager", "field_manager":
			w.fieldManager = v
		case "fieldValidation", "field_validation":
			w.fieldValidation = v
		case "accept":
			w.accept = v
		case "force":
			b, err := strconv.ParseBool(v)
			if !patch || err != nil {
				return false // the default parser words the error
			}
			w.force = &b
		default:
			return false
		}
		return true
	})
	w.ref = ref
	return w, ok
}

// fillFrom reads the ref.* keys of values into a ResourceRef (nil when
// there are none) and hands every other key to field, which reports
// whether it knows it. It fails on a key field does not know and on a key
// with other than one value.
func fillFrom(values url.Values, field func(k, v string) bool) (*apiv1.ResourceRef, bool) {
	var ref *apiv1.ResourceRef
	for k, v := range values {
		if len(v) != 1 {
			return nil, false
		}
		if strings.HasPrefix(k, "ref.") {
			if ref == nil {
				ref = &apiv1.ResourceRef{}
			}
			if fillRef(ref, k, v[0]) {
				continue
			}
			return nil, false
		}
		if !field(k, v[0]) {
			return nil, false
		}
	}
	return ref, true
}

// fillRef sets the field of ref that key ("ref.group" …) names and reports
// whether there was one.
func fillRef(ref *apiv1.ResourceRef, key, v string) bool {
	switch key {
	case "ref.group":
		ref.Group = v
	case "ref.version":
		ref.Version = v
	case "ref.resource":
		ref.Resource = v
	case "ref.namespace":
		ref.Namespace = v
	case "ref.name":
		ref.Name = v
	case "ref.subresource":
		ref.Subresource = v
	default:
		return false
	}
	return true
}
