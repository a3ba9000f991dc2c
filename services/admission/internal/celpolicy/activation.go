package celpolicy

import (
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	celcommon "k8s.io/apiserver/pkg/cel/common"
	"k8s.io/apiserver/pkg/cel/library"
)

// celInput is what every validating policy of one request reads, as CEL
// values built once per request (kube-apiserver's plugin rebuilds them
// for each policy and each list of expressions): object, oldObject,
// request, namespaceObject (the trimmed copy the validations see and the
// whole object the audit annotations see) and the authorizer.
//
// The values are lazy: the request and namespace convert their fields on
// first use and cache them, and object and oldObject are shared values
// (sharedMap) keeping every field a policy converted for the policies
// after it, without locking. That is safe because a
// request's policies are evaluated one at a time (policy.Evaluator runs
// them in order), and a celInput is never shared between requests.
type celInput struct {
	object, oldObject any // nil: no object (a delete has no object)
	// request, namespace, rawNamespace and the authorizer values are
	// built on first read (requestVal, namespaceVal, authorizerVals) from
	// the fields after them, nil until then: many policies read none of
	// them.
	request       ref.Val
	namespace     ref.Val // plugincel.CreateNamespaceObject of the namespace
	rawNamespace  ref.Val // the namespace as stored
	authorizer    any     // nil without an authorizer
	resourceAuthz any
	versioned     *admission.VersionedAttributes
	resource      metav1.GroupVersionResource
	ns            *corev1.Namespace
	authz         authorizer.UnconditionalAuthorizer
	// memo holds the values of the untracked programs that read only the
	// inputs above, by memoKey, for the policies after the first that
	// holds the same expression (see remember); only keys in shared
	// (sharedKeys of the policy set) are kept.
	memo   map[string]ref.Val
	shared map[string]bool
	// scratch is reused by each policy's evaluation in turn.
	scratch scratch
	// size bounds the size of every string, list and map in object,
	// oldObject, request and namespaceObject: the largest of the
	// request's and the namespace's serialized sizes.
	size uint64
}

// newCELInput converts the request a (with ns its namespace, nil when none)
// as kube-apiserver's newActivation does, for policies matched against
// a's own resource and kind.
func newCELInput(a *attributes, ns *corev1.Namespace, authz authorizer.UnconditionalAuthorizer) (*celInput, error) {
	v := a.versioned
	//nolint:staticcheck // SA1019: the field says which conversion kube-apiserver's plugins use.
	v.VersionedObject.UseSchemalessTypeRef, v.VersionedOldObject.UseSchemalessTypeRef = true, true
	old, err := v.VersionedOldObject.CELValue()
	if err != nil {
		return nil, err
	}
	obj, err := v.VersionedObject.CELValue()
	if err != nil {
		return nil, err
	}
	in := &celInput{
		versioned: v,
		resource:  metav1.GroupVersionResource(a.GetResource()),
		ns:        ns,
		authz:     authz,
		size:      a.size,
	}
	if ns != nil {
		in.size = max(in.size, uint64(ns.Size()))
	}
	// object and oldObject stay untyped nil when absent, as in
	// kube-apiserver's activation.
	if old != nil {
		in.oldObject = share(old)
	}
	if obj != nil {
		in.object = share(obj)
	}
	return in, nil
}

// requestVal is the `request` variable.
func (in *celInput) requestVal() ref.Val {
	if in.request == nil {
		v := in.versioned
		in.request = celcommon.SchemalessTypedToVal(plugincel.CreateAdmissionRequest(v.Attributes, in.resource, metav1.GroupVersionKind(v.VersionedKind)))
	}
	return in.request
}

// namespaceVal is the `namespaceObject` variable: the trimmed copy, or
// the namespace as stored when raw.
func (in *celInput) namespaceVal(raw bool) ref.Val {
	if raw {
		if in.rawNamespace == nil {
			in.rawNamespace = celcommon.SchemalessTypedToVal(in.ns)
		}
		return in.rawNamespace
	}
	if in.namespace == nil {
		in.namespace = celcommon.SchemalessTypedToVal(plugincel.CreateNamespaceObject(in.ns))
	}
	return in.namespace
}

// authorizerVals are the `authorizer` and `authorizer.requestResource`
// variables, nil without an authorizer.
func (in *celInput) authorizerVals() (authz, resource any) {
	if in.authorizer == nil && in.authz != nil {
		v := in.versioned
		in.authorizer = library.NewAuthorizerVal(v.GetUserInfo(), in.authz)
		in.resourceAuthz = library.NewResourceAuthorizerVal(v.GetUserInfo(), in.authz, v)
	}
	return in.authorizer, in.resourceAuthz
}

// activation is the CEL activation of one list of a policy's expressions
// (its validations, message expressions or audit annotations) for one
// param: the request's shared values, the param, and the policy's
// variables, evaluated lazily and once per list (as kube-apiserver's
// composition context does).
type activation struct {
	in           *celInput
	params       any
	rawNamespace bool // namespaceObject is the namespace as stored (audit annotations)
	authorizer   bool // whether the authorizer variables are bound
	variables    ref.Val
}

var _ interpreter.Activation = (*activation)(nil)

// ResolveName returns the value of a CEL variable, as kube-apiserver's
// evaluationActivation does.
func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case plugincel.ObjectVarName:
		return a.in.object, true
	case plugincel.OldObjectVarName:
		return a.in.oldObject, true
	case plugincel.ParamsVarName:
		return a.params, true // params may be null
	case plugincel.RequestVarName:
		return a.in.requestVal(), true
	case plugincel.NamespaceVarName:
		return a.in.namespaceVal(a.rawNamespace), true
	case plugincel.AuthorizerVarName:
		if !a.authorizer {
			return nil, false
		}
		authz, _ := a.in.authorizerVals()
		return authz, authz != nil
	case plugincel.RequestResourceAuthorizerVarName:
		if !a.authorizer {
			return nil, false
		}
		_, resource := a.in.authorizerVals()
		return resource, resource != nil
	case plugincel.VariableVarName:
		return a.variables, true
	default:
		return nil, false
	}
}

// Parent is nil: the activation has no parent.
func (a *activation) Parent() interpreter.Activation { return nil }

// scratch is the memory one validating policy's untracked evaluation
// uses, reused by the next policy of the request instead of allocated
// per policy. What it hands out is valid until the next policy's
// evaluation starts: validatingInvocation.check has consumed a policy's
// results (turned them into its decision) by then, and the policies of a
// request are evaluated one at a time (see celInput).
type scratch struct {
	run        untrackedRun
	vals       []ref.Val
	evalResult []plugincel.EvaluationResult
	decided    []policyDecision
}

// values returns n nil values (a list's variables, not evaluated yet).
func (s *scratch) values(n int) []ref.Val {
	if cap(s.vals) < n {
		s.vals = make([]ref.Val, n)
	}
	s.vals = s.vals[:n]
	clear(s.vals)
	return s.vals
}

// results returns zeroed results for nv validations and nm message
// expressions (nil when nm is 0).
func (s *scratch) results(nv, nm int) (val, msg []plugincel.EvaluationResult) {
	if cap(s.evalResult) < nv+nm {
		s.evalResult = make([]plugincel.EvaluationResult, nv+nm)
	}
	s.evalResult = s.evalResult[:nv+nm]
	clear(s.evalResult)
	val = s.evalResult[:nv:nv]
	if nm > 0 {
		msg = s.evalResult[nv:]
	}
	return val, msg
}

// decisions returns n zeroed decisions.
func (s *scratch) decisions(n int) []policyDecision {
	if n == 0 {
		return []policyDecision{} // not nil, as make returns it
	}
	if cap(s.decided) < n {
		s.decided = make([]policyDecision, n)
	}
	s.decided = s.decided[:n]
	clear(s.decided)
	return s.decided
}
