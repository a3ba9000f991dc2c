// Package table renders objects and lists as meta.k8s.io/v1 Tables, the
// form kubectl get asks for (Accept: application/json;as=Table;g=meta.k8s.io;v=v1):
// a Name column, the kind's own columns (registry.Resource.Columns) or
// Created At, and per row the object, its metadata, or nothing.
package table

import (
	"fmt"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

var nameColumn = registry.Column{
	Definition: metav1.TableColumnDefinition{Name: "Name", Type: "string", Format: "name", Description: "Name must be unique within a namespace."},
	Cell:       func(obj runtime.Object, _ time.Time) any { a, _ := meta.Accessor(obj); return a.GetName() },
}

var createdAtColumn = registry.Column{
	Definition: metav1.TableColumnDefinition{Name: "Created At", Type: "date", Description: "The time the object was created."},
	Cell: func(obj runtime.Object, _ time.Time) any {
		a, _ := meta.Accessor(obj)
		return a.GetCreationTimestamp().UTC().Format(time.RFC3339)
	},
}

// Columns returns every column of res's tables.
func Columns(res *registry.Resource) []registry.Column {
	if len(res.Columns) == 0 {
		return []registry.Column{nameColumn, createdAtColumn}
	}
	return append([]registry.Column{nameColumn}, res.Columns...)
}

// Render renders obj (an object or a list of res) as a Table at time now.
func Render(c *codec.Codec, res *registry.Resource, obj runtime.Object, include metav1.IncludeObjectPolicy, now time.Time) (*metav1.Table, error) {
	cols := Columns(res)
	t := &metav1.Table{TypeMeta: metav1.TypeMeta{Kind: "Table", APIVersion: "meta.k8s.io/v1"}}
	for _, col := range cols {
		t.ColumnDefinitions = append(t.ColumnDefinitions, col.Definition)
	}
	var items []runtime.Object
	if meta.IsListType(obj) {
		var err error
		if items, err = meta.ExtractList(obj); err != nil {
			return nil, fmt.Errorf("table: %w", err)
		}
		lm, err := meta.ListAccessor(obj)
		if err != nil {
			return nil, fmt.Errorf("table: %w", err)
		}
		t.ResourceVersion, t.Continue, t.RemainingItemCount = lm.GetResourceVersion(), lm.GetContinue(), lm.GetRemainingItemCount()
	} else {
		items = []runtime.Object{obj}
		if a, err := meta.Accessor(obj); err == nil {
			t.ResourceVersion = a.GetResourceVersion()
		}
	}
	t.Rows = make([]metav1.TableRow, 0, len(items))
	for _, item := range items {
		row := metav1.TableRow{Cells: make([]any, len(cols))}
		for i, col := range cols {
			row.Cells[i] = col.Cell(item, now)
		}
		raw, err := rowObject(c, item, include)
		if err != nil {
			return nil, err
		}
		row.Object = raw
		t.Rows = append(t.Rows, row)
	}
	return t, nil
}

// rowObject is the object in a table row: nothing, its metadata as a
// PartialObjectMetadata (the default), or all of it.
func rowObject(c *codec.Codec, item runtime.Object, policy metav1.IncludeObjectPolicy) (runtime.RawExtension, error) {
	var obj runtime.Object
	switch policy {
	case metav1.IncludeNone:
		return runtime.RawExtension{}, nil
	case metav1.IncludeObject:
		obj = item
	default:
		a, err := meta.Accessor(item)
		if err != nil {
			return runtime.RawExtension{}, fmt.Errorf("table: %w", err)
		}
		pom := meta.AsPartialObjectMetadata(a)
		pom.TypeMeta = metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: "meta.k8s.io/v1"}
		obj = pom
	}
	data, err := c.EncodeToBytes(obj, negotiation.JSON)
	if err != nil {
		return runtime.RawExtension{}, err
	}
	return runtime.RawExtension{Raw: data}, nil
}
