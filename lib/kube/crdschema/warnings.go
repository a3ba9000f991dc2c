package crdschema

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// standardFinalizers are the finalizer names Kubernetes itself uses, which
// need no domain.
var standardFinalizers = []string{
	metav1.FinalizerOrphanDependents,
	metav1.FinalizerDeleteDependents,
	string(corev1.FinalizerKubernetes),
}

// finalizerWarnings warns, as upstream does for custom resources, about
// finalizers added by this write (all of them on create) whose names are
// not domain-qualified with a path.
func finalizerWarnings(obj, old *unstructured.Unstructured) []string {
	added := sets.New(obj.GetFinalizers()...)
	if old != nil {
		added = added.Difference(sets.New(old.GetFinalizers()...))
	}
	path := field.NewPath("metadata", "finalizers").String()
	var out []string
	for _, f := range sets.List(added) {
		for _, msg := range validation.IsQualifiedName(f) {
			out = append(out, fmt.Sprintf("%s: %q: %s", path, f, msg))
		}
		if strings.Contains(f, "/") || slices.Contains(standardFinalizers, f) {
			continue
		}
		if strings.Contains(f, ".") {
			out = append(out, fmt.Sprintf("%s: %q: prefer a domain-qualified finalizer name including a path (/) to avoid accidental conflicts with other finalizer writers", path, f))
		} else {
			out = append(out, fmt.Sprintf("%s: %q: prefer a domain-qualified finalizer name to avoid accidental conflicts with other finalizer writers", path, f))
		}
	}
	return out
}
