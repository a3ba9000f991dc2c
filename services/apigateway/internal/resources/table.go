package resources

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/meridian-cp/meridian/services/apigateway/internal/negotiation"
	"github.com/meridian-cp/meridian/services/apigateway/internal/registry"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
)

// output is what a read returns: the media type, and whether the client
// asked for a Table (Accept: application/json;as=Table;g=meta.k8s.io;v=v1)
// and with which objects in its rows.
type output struct {
	mediaType     string
	table         bool
	includeObject metav1.IncludeObjectPolicy
}

// negotiateOutput negotiates a response against one of the negotiation
// option sets: a Table where the client lists it first, else the object.
func negotiateOutput(accept, includeObject string, opts negotiation.Options) (output, error) {
	mt, ok := negotiation.Negotiate(accept, opts)
	if !ok {
		return output{}, apierrors.NewGenericServerResponse(http.StatusNotAcceptable, "", schema.GroupResource{}, "",
			"none of the requested media types is served: "+strings.Join(opts.Types, ", ")+" and application/json;as=Table;g=meta.k8s.io;v=v1 are", 0, false)
	}
	out := output{mediaType: mt.Type}
	if negotiation.IsTable(mt) {
		out.table = true
		switch p := metav1.IncludeObjectPolicy(includeObject); p {
		case "":
			out.includeObject = metav1.IncludeMetadata
		case metav1.IncludeNone, metav1.IncludeMetadata, metav1.IncludeObject:
			out.includeObject = p
		default:
			return output{}, apierrors.NewBadRequest(fmt.Sprintf("includeObject: unsupported value %q", includeObject))
		}
	}
	return out, nil
}

// column is one column of a kind's table: what kubectl get prints for it.
type column struct {
	def  metav1.TableColumnDefinition
	cell func(obj runtime.Object, now time.Time) any
}

var nameColumn = column{
	def:  metav1.TableColumnDefinition{Name: "Name", Type: "string", Format: "name", Description: "Name must be unique within a namespace."},
	cell: func(obj runtime.Object, _ time.Time) any { a, _ := meta.Accessor(obj); return a.GetName() },
}

var ageColumn = column{
	def: metav1.TableColumnDefinition{Name: "Age", Type: "string", Description: "CreationTimestamp is the time the object was created."},
	cell: func(obj runtime.Object, now time.Time) any {
		a, _ := meta.Accessor(obj)
		ts := a.GetCreationTimestamp()
		if ts.IsZero() {
			return "<unknown>"
		}
		return duration.HumanDuration(now.Sub(ts.Time))
	},
}

// columns returns the columns kubectl prints for a kind; kinds without
// their own get Name and Created At.
func columns(res *registry.Resource) []column {
	switch res.Kind {
	case "Namespace":
		return []column{nameColumn, {
			def:  metav1.TableColumnDefinition{Name: "Status", Type: "string", Description: "The status of the namespace"},
			cell: func(obj runtime.Object, _ time.Time) any { return string(obj.(*corev1.Namespace).Status.Phase) },
		}, ageColumn}
	case "ConfigMap":
		return []column{nameColumn, {
			def: metav1.TableColumnDefinition{Name: "Data", Type: "string", Description: "Number of keys"},
			cell: func(obj runtime.Object, _ time.Time) any {
				cm := obj.(*corev1.ConfigMap)
				return int64(len(cm.Data) + len(cm.BinaryData))
			},
		}, ageColumn}
	case "Secret":
		return []column{nameColumn, {
			def:  metav1.TableColumnDefinition{Name: "Type", Type: "string", Description: "The type of the secret"},
			cell: func(obj runtime.Object, _ time.Time) any { return string(obj.(*corev1.Secret).Type) },
		}, {
			def:  metav1.TableColumnDefinition{Name: "Data", Type: "string", Description: "Number of keys"},
			cell: func(obj runtime.Object, _ time.Time) any { return int64(len(obj.(*corev1.Secret).Data)) },
		}, ageColumn}
	}
	return []column{nameColumn, {
		def: metav1.TableColumnDefinition{Name: "Created At", Type: "date", Description: "The time the object was created."},
		cell: func(obj runtime.Object, _ time.Time) any {
			a, _ := meta.Accessor(obj)
			return a.GetCreationTimestamp().UTC().Format(time.RFC3339)
		},
	}}
}

// toTable renders an object or a list as a Table.
func (s *Server) toTable(res *registry.Resource, obj runtime.Object, out output) (*metav1.Table, error) {
	cols := columns(res)
	t := &metav1.Table{TypeMeta: metav1.TypeMeta{Kind: "Table", APIVersion: "meta.k8s.io/v1"}}
	for _, c := range cols {
		t.ColumnDefinitions = append(t.ColumnDefinitions, c.def)
	}
	var items []runtime.Object
	if meta.IsListType(obj) {
		var err error
		if items, err = meta.ExtractList(obj); err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		lm, err := meta.ListAccessor(obj)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		t.ResourceVersion, t.Continue, t.RemainingItemCount = lm.GetResourceVersion(), lm.GetContinue(), lm.GetRemainingItemCount()
	} else {
		items = []runtime.Object{obj}
		if a, err := meta.Accessor(obj); err == nil {
			t.ResourceVersion = a.GetResourceVersion()
		}
	}
	now := s.cfg.Now()
	t.Rows = make([]metav1.TableRow, 0, len(items))
	for _, item := range items {
		row := metav1.TableRow{Cells: make([]any, len(cols))}
		for i, c := range cols {
			row.Cells[i] = c.cell(item, now)
		}
		raw, err := s.rowObject(item, out.includeObject)
		if err != nil {
			return nil, err
		}
		row.Object = raw
		t.Rows = append(t.Rows, row)
	}
	return t, nil
}

// rowObject is the object in a table row: nothing, its metadata as a
// PartialObjectMetadata, or all of it.
func (s *Server) rowObject(item runtime.Object, policy metav1.IncludeObjectPolicy) (runtime.RawExtension, error) {
	var obj runtime.Object
	switch policy {
	case metav1.IncludeNone:
		return runtime.RawExtension{}, nil
	case metav1.IncludeObject:
		obj = item
	default:
		a, err := meta.Accessor(item)
		if err != nil {
			return runtime.RawExtension{}, apierrors.NewInternalError(err)
		}
		pom := meta.AsPartialObjectMetadata(a)
		pom.TypeMeta = metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: "meta.k8s.io/v1"}
		obj = pom
	}
	data, err := s.cfg.Codec.EncodeToBytes(obj, negotiation.JSON)
	if err != nil {
		return runtime.RawExtension{}, apierrors.NewInternalError(err)
	}
	return runtime.RawExtension{Raw: data}, nil
}

// render encodes a read's result as the client asked: a Table or the
// object.
func (s *Server) render(res *registry.Resource, obj runtime.Object, out output) ([]byte, error) {
	if !out.table {
		return s.cfg.Codec.EncodeToBytes(obj, out.mediaType)
	}
	t, err := s.toTable(res, obj, out)
	if err != nil {
		return nil, err
	}
	return s.cfg.Codec.EncodeToBytes(t, negotiation.JSON)
}
