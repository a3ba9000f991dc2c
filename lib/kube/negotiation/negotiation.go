// Package negotiation picks the media type of a response from a request's
// Accept header, and checks the media type of a request body, the way
// kube-apiserver does: Accept is a comma-separated list of media ranges with
// optional parameters and q-values; the first acceptable range of the
// highest q wins; a range with parameters the server does not serve (for
// example as=Table when tables are not supported) is skipped.
package negotiation

import (
	"mime"
	"sort"
	"strconv"
	"strings"
)

// Media types the gateway serves.
const (
	JSON     = "application/json"
	YAML     = "application/yaml"
	Protobuf = "application/vnd.kubernetes.protobuf"
)

// Patch and apply media types accepted as request bodies.
const (
	JSONPatch           = "application/json-patch+json"
	MergePatch          = "application/merge-patch+json"
	StrategicMergePatch = "application/strategic-merge-patch+json"
	ApplyPatchYAML      = "application/apply-patch+yaml"
	ApplyPatchCBOR      = "application/apply-patch+cbor"
)

// MediaType is a negotiated response format.
type MediaType struct {
	// Type is the bare media type, e.g. application/json.
	Type string
	// Params are its parameters, lower-cased keys.
	Params map[string]string
}

// Options says which special parameter sets a caller can serve.
type Options struct {
	// Types are the bare media types served, in order of preference for
	// wildcards.
	Types []string
	// AcceptParams reports whether a media range with these parameters can
	// be served; nil accepts only ranges without parameters other than
	// stream=watch, charset and pretty.
	AcceptParams func(mediaType string, params map[string]string) bool
}

type rangeEntry struct {
	typ    string
	params map[string]string
	q      float64
	index  int
}

// Negotiate picks the response media type for an Accept header. An empty
// header picks the first of opts.Types. ok is false when nothing offered
// is acceptable (406).
func Negotiate(accept string, opts Options) (mt MediaType, ok bool) {
	if strings.TrimSpace(accept) == "" {
		return MediaType{Type: opts.Types[0]}, true
	}
	if mt, ok := negotiateBare(accept, opts); ok {
		return mt, true
	}
	return negotiate(accept, opts)
}

// negotiateBare picks, without parsing, the media type of the Accept
// headers most clients send: one media type served, without parameters,
// alone or followed by "*/*" (client-go's "application/json, */*"). It
// reports false for any other header, and for a type opts.AcceptParams
// refuses without parameters; negotiate picks the same type for the
// headers it picks one for: the first range, of q 1, wins.
func negotiateBare(accept string, opts Options) (MediaType, bool) {
	first, rest, _ := strings.Cut(accept, ",")
	first = strings.TrimSpace(first)
	if r := strings.TrimSpace(rest); r != "" && r != "*/*" {
		return MediaType{}, false
	}
	for _, served := range opts.Types {
		if first != served {
			continue
		}
		return MediaType{Type: served}, opts.acceptParams()(served, nil)
	}
	return MediaType{}, false
}

// negotiate is Negotiate for a header that is not empty: every media
// range parsed, the first acceptable one of the highest q wins.
func negotiate(accept string, opts Options) (mt MediaType, ok bool) {
	var ranges []rangeEntry
	for i, part := range strings.Split(accept, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		typ, params, err := mime.ParseMediaType(part)
		if err != nil {
			continue
		}
		q := 1.0
		if v, has := params["q"]; has {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				q = f
			}
			delete(params, "q")
		}
		if q <= 0 {
			continue
		}
		ranges = append(ranges, rangeEntry{typ: typ, params: params, q: q, index: i})
	}
	sort.SliceStable(ranges, func(a, b int) bool { return ranges[a].q > ranges[b].q })
	accepted := opts.acceptParams()
	for _, r := range ranges {
		for _, served := range opts.Types {
			if !matches(r.typ, served) {
				continue
			}
			if !accepted(served, r.params) {
				continue
			}
			return MediaType{Type: served, Params: r.params}, true
		}
	}
	return MediaType{}, false
}

func matches(rangeType, served string) bool {
	if rangeType == "*/*" || rangeType == served {
		return true
	}
	if strings.HasSuffix(rangeType, "/*") {
		return strings.HasPrefix(served, strings.TrimSuffix(rangeType, "*"))
	}
	return false
}

// acceptParams is o.AcceptParams, or plainParams when it is nil.
func (o Options) acceptParams() func(mediaType string, params map[string]string) bool {
	if o.AcceptParams == nil {
		return plainParams
	}
	return o.AcceptParams
}

func plainParams(_ string, params map[string]string) bool {
	for k := range params {
		switch k {
		case "stream", "charset", "pretty":
		default:
			return false
		}
	}
	return true
}

// ContentType returns the bare media type of a Content-Type header, and
// whether it parsed.
func ContentType(header string) (string, bool) {
	if strings.TrimSpace(header) == "" {
		return "", false
	}
	typ, _, err := mime.ParseMediaType(header)
	if err != nil {
		return "", false
	}
	return typ, true
}

// Reads are what get and list serve: JSON, YAML, protobuf, JSON Tables and
// PartialObjectMetadata(List) of meta.k8s.io v1 and v1beta1.
var Reads = Options{Types: []string{JSON, YAML, Protobuf}, AcceptParams: transformParams}

// Watches are what watch streams serve: JSON and protobuf events, whose
// objects may be Tables or PartialObjectMetadata.
var Watches = Options{Types: []string{JSON, Protobuf}, AcceptParams: transformParams}

// Writes are what create, update, patch and delete return.
var Writes = Options{Types: []string{JSON, YAML, Protobuf}}

// IsTable reports whether a negotiated media type asks for a Table.
func IsTable(mt MediaType) bool { return mt.Params["as"] == "Table" }

// IsPartialObjectMetadata reports whether a negotiated media type asks for
// metadata only (PartialObjectMetadata or PartialObjectMetadataList).
func IsPartialObjectMetadata(mt MediaType) bool {
	as := mt.Params["as"]
	return as == "PartialObjectMetadata" || as == "PartialObjectMetadataList"
}

// transformParams accepts plain media ranges, JSON Tables, and JSON or
// protobuf PartialObjectMetadata(List).
func transformParams(mediaType string, params map[string]string) bool {
	as, hasAs := params["as"]
	for k := range params {
		switch k {
		case "as", "g", "v", "stream", "charset", "pretty":
		default:
			return false
		}
	}
	if !hasAs {
		_, g := params["g"]
		_, v := params["v"]
		return !g && !v
	}
	if params["g"] != "meta.k8s.io" || (params["v"] != "v1" && params["v"] != "v1beta1") {
		return false
	}
	switch as {
	case "Table":
		return mediaType == JSON
	case "PartialObjectMetadata", "PartialObjectMetadataList":
		return mediaType == JSON || mediaType == Protobuf
	}
	return false
}
