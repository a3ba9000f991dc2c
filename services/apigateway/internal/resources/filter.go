package resources

import (
	"fmt"

	"github.com/meridian-cp/meridian/services/apigateway/internal/registry"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// filter selects objects by namespace, labels and fields.
type filter struct {
	namespace string
	labels    labels.Selector
	fields    fields.Selector
}

// newFilter parses selectors; a bad selector, or a field kube-apiserver does
// not index for the kind, is a 400.
func newFilter(res *registry.Resource, ns, labelSel, fieldSel string) (*filter, error) {
	f := &filter{namespace: ns, labels: labels.Everything(), fields: fields.Everything()}
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
		for _, r := range sel.Requirements() {
			if !supportedField(res, r.Field) {
				return nil, apierrors.NewBadRequest(fmt.Sprintf("field label not supported: %s", r.Field))
			}
		}
		f.fields = sel
	}
	return f, nil
}

func supportedField(res *registry.Resource, field string) bool {
	switch field {
	case "metadata.name", "metadata.namespace":
		return true
	}
	switch res.Kind {
	case "Secret":
		return field == "type"
	case "Namespace":
		return field == "status.phase"
	}
	return false
}

func (f *filter) empty() bool { return f.labels.Empty() && f.fields.Empty() }

// nameOnly returns the name a field selector pins (metadata.name=x), so a
// watch on one object can start from its key.
func (f *filter) nameOnly() (string, bool) {
	return f.fields.RequiresExactMatch("metadata.name")
}

func (f *filter) matches(obj runtime.Object) bool {
	if f.empty() {
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
	switch o := obj.(type) {
	case *corev1.Secret:
		set["type"] = string(o.Type)
	case *corev1.Namespace:
		set["status.phase"] = string(o.Status.Phase)
	}
	return f.fields.Matches(set)
}
