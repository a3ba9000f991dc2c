package apfbootstrap

import (
	"maps"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// IsMandatory reports whether name is a mandatory object's (exempt,
// catch-all; the same names for both kinds).
func IsMandatory(name string) bool { return name == Exempt || name == CatchAll }

// ServersOwn reports whether the servers own a stored suggested object's
// spec, as the spec decides: the annotation "true" says yes, "false" no;
// without either, an object never changed since it was created
// (metadata.generation 1) is the servers'.
func ServersOwn(m *metav1.ObjectMeta) bool {
	switch m.Annotations[AutoUpdateAnnotation] {
	case "true":
		return true
	case "false":
		return false
	}
	return m.Generation == 1
}

// Orphaned reports whether a stored object that is neither mandatory nor
// suggested must be deleted: it says the servers own it.
func Orphaned(m *metav1.ObjectMeta) bool { return m.Annotations[AutoUpdateAnnotation] == "true" }

// annotated returns m with the ownership annotation set to owned, and
// whether that changed it.
func annotated(m metav1.ObjectMeta, owned bool) (metav1.ObjectMeta, bool) {
	v := "false"
	if owned {
		v = "true"
	}
	if m.Annotations[AutoUpdateAnnotation] == v {
		return m, false
	}
	m.Annotations = maps.Clone(m.Annotations)
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[AutoUpdateAnnotation] = v
	return m, true
}

// MaintainFlowSchema returns what the stored flow schema want names must
// become, and whether that differs from stored: a mandatory one always
// has want's spec; a suggested one has it while the servers own it
// (ServersOwn); both carry an annotation that says who owns them.
func MaintainFlowSchema(stored, want *flowcontrolv1.FlowSchema) (*flowcontrolv1.FlowSchema, bool) {
	owned := IsMandatory(want.Name) || ServersOwn(&stored.ObjectMeta)
	out := stored.DeepCopy()
	var changed bool
	out.ObjectMeta, changed = annotated(out.ObjectMeta, owned)
	if owned && !equality.Semantic.DeepEqual(out.Spec, want.Spec) {
		out.Spec = *want.Spec.DeepCopy()
		changed = true
	}
	return out, changed
}

// MaintainPriorityLevel is MaintainFlowSchema for priority levels. The
// mandatory exempt level keeps its stored spec.exempt (its shares and
// lendable percentage are the users' to set, as kube-apiserver allows).
func MaintainPriorityLevel(stored, want *flowcontrolv1.PriorityLevelConfiguration) (*flowcontrolv1.PriorityLevelConfiguration, bool) {
	owned := IsMandatory(want.Name) || ServersOwn(&stored.ObjectMeta)
	out := stored.DeepCopy()
	var changed bool
	out.ObjectMeta, changed = annotated(out.ObjectMeta, owned)
	spec := *want.Spec.DeepCopy()
	if want.Name == Exempt && stored.Spec.Exempt != nil {
		spec.Exempt = stored.Spec.Exempt.DeepCopy()
	}
	if owned && !equality.Semantic.DeepEqual(out.Spec, spec) {
		out.Spec = spec
		changed = true
	}
	return out, changed
}
