// Package selection filters objects by label and field selectors, with the
// fields kube-apiserver supports: metadata.name and metadata.namespace for
// every kind, plus each kind's own (registry.Resource.Fields), e.g. a
// Secret's type.
package selection

import (
	"fmt"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
)

// Filter selects objects. It is immutable and safe for concurrent use.
type Filter struct {
	res    *registry.Resource
	labels labels.Selector
	fields fields.Selector
	// empty caches Empty: watchfanout's cache asks it per watcher per
	// event.
	empty bool
}

// New parses selectors; a bad selector, or a field the kind does not
// support, is a 400 BadRequest.
func New(res *registry.Resource, labelSel, fieldSel string) (*Filter, error) {
	f := &Filter{res: res, labels: labels.Everything(), fields: fields.Everything()}
	if labelSel != "" {
		sel, err := labels.Parse(labelSel)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("unable to parse requirement: %v", err))
		}
		f.labels = sel
	}
	if fieldSel != "" {
		sel, err := fields.ParseSelector(fieldSel)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid field selector: %v", err))
		}
		var own map[string]string
		if res.Fields != nil {
			own = res.Fields(nil)
		}
		for _, r := range sel.Requirements() {
			if _, ok := own[r.Field]; !ok && r.Field != "metadata.name" && r.Field != "metadata.namespace" {
				return nil, apierrors.NewBadRequest(fmt.Sprintf("field label not supported: %s", r.Field))
			}
		}
		f.fields = sel
	}
	f.empty = f.labels.Empty() && f.fields.Empty()
	return f, nil
}

// Empty reports whether the filter selects everything.
func (f *Filter) Empty() bool { return f.empty }

// Name returns the name a field selector pins (metadata.name=x).
func (f *Filter) Name() (string, bool) { return f.fields.RequiresExactMatch("metadata.name") }

// LabelEquals returns a label the label selector pins to one value (k=v,
// k==v or k in (v)), the first in the selector's order; false when it pins
// none.
func (f *Filter) LabelEquals() (key, value string, ok bool) {
	reqs, _ := f.labels.Requirements()
	for _, r := range reqs {
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			if vals := r.Values(); vals.Len() == 1 {
				return r.Key(), vals.UnsortedList()[0], true
			}
		}
	}
	return "", "", false
}

// MetadataOnly reports whether the filter looks at nothing but an object's
// name, namespace and labels (no field selector on a kind's own fields),
// so that MatchesMetadata decides as Matches would.
func (f *Filter) MetadataOnly() bool {
	for _, r := range f.fields.Requirements() {
		if r.Field != "metadata.name" && r.Field != "metadata.namespace" {
			return false
		}
	}
	return true
}

// MatchesMetadata reports whether an object of that name, namespace and
// labels is selected. Only for a MetadataOnly filter: the kind's own fields
// are not consulted.
func (f *Filter) MatchesMetadata(name, namespace string, lbls map[string]string) bool {
	if f.Empty() {
		return true
	}
	if !f.labels.Matches(labels.Set(lbls)) {
		return false
	}
	return f.fields.Empty() || f.fields.Matches(fields.Set{"metadata.name": name, "metadata.namespace": namespace})
}

// Matches reports whether obj is selected.
func (f *Filter) Matches(obj runtime.Object) bool {
	if f.Empty() {
		return true
	}
	acc, err := meta.Accessor(obj)
	if err != nil {
		return false
	}
	if !f.labels.Matches(labels.Set(acc.GetLabels())) {
		return false
	}
	if f.fields.Empty() {
		return true
	}
	set := fields.Set{"metadata.name": acc.GetName(), "metadata.namespace": acc.GetNamespace()}
	if f.res.Fields != nil {
		for k, v := range f.res.Fields(obj) {
			set[k] = v
		}
	}
	return f.fields.Matches(set)
}
