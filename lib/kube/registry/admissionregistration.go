package registry

import (
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// AdmissionRegistration returns the admissionregistration.k8s.io/v1
// resources, all cluster-scoped: ValidatingAdmissionPolicies (with a
// status subresource) and their bindings, MutatingAdmissionPolicies and
// their bindings, ValidatingWebhookConfigurations and
// MutatingWebhookConfigurations. Writes are defaulted as kube-apiserver's
// v1 defaults do and validated as its validation does, every CEL
// expression compiled against lib/kube/celenv at write
// (admissionregistration_validation.go).
func AdmissionRegistration() []*Resource {
	gv := admissionregistrationv1.SchemeGroupVersion
	cat := []string{"api-extensions"}
	return []*Resource{
		{
			GVR: gv.WithResource("validatingadmissionpolicies"), Kind: "ValidatingAdmissionPolicy", ListKind: "ValidatingAdmissionPolicyList",
			SingularName: "validatingadmissionpolicy", Categories: cat, Verbs: CRUDVerbs, Subresources: []string{"status"},
			New:      func() runtime.Object { return &admissionregistrationv1.ValidatingAdmissionPolicy{} },
			NewList:  func() runtime.Object { return &admissionregistrationv1.ValidatingAdmissionPolicyList{} },
			Strategy: validatingPolicyStrategy{},
			Columns: []Column{{
				Definition: metav1.TableColumnDefinition{Name: "Validations", Type: "integer", Description: "Number of validations"},
				Cell: func(obj runtime.Object, _ time.Time) any {
					return int64(len(obj.(*admissionregistrationv1.ValidatingAdmissionPolicy).Spec.Validations))
				},
			}, {
				Definition: metav1.TableColumnDefinition{Name: "ParamKind", Type: "string", Description: "The kind of the parameters"},
				Cell: func(obj runtime.Object, _ time.Time) any {
					return paramKindCell(obj.(*admissionregistrationv1.ValidatingAdmissionPolicy).Spec.ParamKind)
				},
			}, AgeColumn},
		},
		{
			GVR: gv.WithResource("validatingadmissionpolicybindings"), Kind: "ValidatingAdmissionPolicyBinding", ListKind: "ValidatingAdmissionPolicyBindingList",
			SingularName: "validatingadmissionpolicybinding", Categories: cat, Verbs: CRUDVerbs,
			New:      func() runtime.Object { return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{} },
			NewList:  func() runtime.Object { return &admissionregistrationv1.ValidatingAdmissionPolicyBindingList{} },
			Strategy: validatingBindingStrategy{},
			Columns: []Column{{
				Definition: metav1.TableColumnDefinition{Name: "PolicyName", Type: "string", Description: "The policy bound"},
				Cell: func(obj runtime.Object, _ time.Time) any {
					return obj.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding).Spec.PolicyName
				},
			}, {
				Definition: metav1.TableColumnDefinition{Name: "ParamRef", Type: "string", Description: "The parameter resource referenced"},
				Cell: func(obj runtime.Object, _ time.Time) any {
					return paramRefCell(obj.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding).Spec.ParamRef)
				},
			}, AgeColumn},
		},
		{
			GVR: gv.WithResource("mutatingadmissionpolicies"), Kind: "MutatingAdmissionPolicy", ListKind: "MutatingAdmissionPolicyList",
			SingularName: "mutatingadmissionpolicy", Categories: cat, Verbs: CRUDVerbs,
			New:      func() runtime.Object { return &admissionregistrationv1.MutatingAdmissionPolicy{} },
			NewList:  func() runtime.Object { return &admissionregistrationv1.MutatingAdmissionPolicyList{} },
			Strategy: mutatingPolicyStrategy{},
			Columns: []Column{{
				Definition: metav1.TableColumnDefinition{Name: "Mutations", Type: "integer", Description: "Number of mutations"},
				Cell: func(obj runtime.Object, _ time.Time) any {
					return int64(len(obj.(*admissionregistrationv1.MutatingAdmissionPolicy).Spec.Mutations))
				},
			}, {
				Definition: metav1.TableColumnDefinition{Name: "ParamKind", Type: "string", Description: "The kind of the parameters"},
				Cell: func(obj runtime.Object, _ time.Time) any {
					return paramKindCell(obj.(*admissionregistrationv1.MutatingAdmissionPolicy).Spec.ParamKind)
				},
			}, AgeColumn},
		},
		{
			GVR: gv.WithResource("mutatingadmissionpolicybindings"), Kind: "MutatingAdmissionPolicyBinding", ListKind: "MutatingAdmissionPolicyBindingList",
			SingularName: "mutatingadmissionpolicybinding", Categories: cat, Verbs: CRUDVerbs,
			New:      func() runtime.Object { return &admissionregistrationv1.MutatingAdmissionPolicyBinding{} },
			NewList:  func() runtime.Object { return &admissionregistrationv1.MutatingAdmissionPolicyBindingList{} },
			Strategy: mutatingBindingStrategy{},
			Columns: []Column{{
				Definition: metav1.TableColumnDefinition{Name: "PolicyName", Type: "string", Description: "The policy bound"},
				Cell: func(obj runtime.Object, _ time.Time) any {
					return obj.(*admissionregistrationv1.MutatingAdmissionPolicyBinding).Spec.PolicyName
				},
			}, {
				Definition: metav1.TableColumnDefinition{Name: "ParamRef", Type: "string", Description: "The parameter resource referenced"},
				Cell: func(obj runtime.Object, _ time.Time) any {
					return paramRefCell(obj.(*admissionregistrationv1.MutatingAdmissionPolicyBinding).Spec.ParamRef)
				},
			}, AgeColumn},
		},
		{
			GVR: gv.WithResource("validatingwebhookconfigurations"), Kind: "ValidatingWebhookConfiguration", ListKind: "ValidatingWebhookConfigurationList",
			SingularName: "validatingwebhookconfiguration", Categories: cat, Verbs: CRUDVerbs,
			New:      func() runtime.Object { return &admissionregistrationv1.ValidatingWebhookConfiguration{} },
			NewList:  func() runtime.Object { return &admissionregistrationv1.ValidatingWebhookConfigurationList{} },
			Strategy: validatingWebhookStrategy{},
			Columns: []Column{{
				Definition: metav1.TableColumnDefinition{Name: "Webhooks", Type: "integer", Description: "Number of webhooks"},
				Cell: func(obj runtime.Object, _ time.Time) any {
					return int64(len(obj.(*admissionregistrationv1.ValidatingWebhookConfiguration).Webhooks))
				},
			}, AgeColumn},
		},
		{
			GVR: gv.WithResource("mutatingwebhookconfigurations"), Kind: "MutatingWebhookConfiguration", ListKind: "MutatingWebhookConfigurationList",
			SingularName: "mutatingwebhookconfiguration", Categories: cat, Verbs: CRUDVerbs,
			New:      func() runtime.Object { return &admissionregistrationv1.MutatingWebhookConfiguration{} },
			NewList:  func() runtime.Object { return &admissionregistrationv1.MutatingWebhookConfigurationList{} },
			Strategy: mutatingWebhookStrategy{},
			Columns: []Column{{
				Definition: metav1.TableColumnDefinition{Name: "Webhooks", Type: "integer", Description: "Number of webhooks"},
				Cell: func(obj runtime.Object, _ time.Time) any {
					return int64(len(obj.(*admissionregistrationv1.MutatingWebhookConfiguration).Webhooks))
				},
			}, AgeColumn},
		},
	}
}

// paramKindCell prints a paramKind as kube-apiserver's printer does.
func paramKindCell(pk *admissionregistrationv1.ParamKind) string {
	if pk == nil {
		return "<unset>"
	}
	return pk.APIVersion + "/" + pk.Kind
}

// paramRefCell prints a paramRef as kube-apiserver's printer does.
func paramRefCell(pr *admissionregistrationv1.ParamRef) string {
	if pr == nil {
		return "<unset>"
	}
	if pr.Namespace != "" {
		return pr.Namespace + "/" + pr.Name
	}
	if pr.Name == "" && pr.Selector != nil {
		return "*"
	}
	return pr.Name
}

type validatingPolicyStrategy struct{}

// PrepareForCreate defaults p, clears its status (the type-checking
// controller writes it) and sets its generation.
func (validatingPolicyStrategy) PrepareForCreate(obj runtime.Object) {
	p := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	DefaultValidatingAdmissionPolicy(p)
	p.Status = admissionregistrationv1.ValidatingAdmissionPolicyStatus{}
	bumpGeneration(&p.ObjectMeta, nil, false)
}

// PrepareForUpdate defaults p and keeps the stored status; a spec change
// bumps the generation (the status' observedGeneration then lags).
func (validatingPolicyStrategy) PrepareForUpdate(obj, old runtime.Object) {
	p, o := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy), old.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	DefaultValidatingAdmissionPolicy(p)
	p.Status = o.Status
	bumpGeneration(&p.ObjectMeta, &o.ObjectMeta, !equality.Semantic.DeepEqual(p.Spec, o.Spec))
}

// PrepareForSubresourceUpdate: a status write changes only the status.
func (validatingPolicyStrategy) PrepareForSubresourceUpdate(sub string, obj, old runtime.Object) bool {
	if sub != "status" {
		return false
	}
	p, o := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy), old.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	p.Spec = o.Spec
	metav1.ResetObjectMetaForStatus(&p.ObjectMeta, &o.ObjectMeta)
	return true
}

func (validatingPolicyStrategy) Validate(obj runtime.Object) field.ErrorList {
	return validateValidatingPolicy(obj.(*admissionregistrationv1.ValidatingAdmissionPolicy), nil)
}

func (validatingPolicyStrategy) ValidateUpdate(obj, old runtime.Object) field.ErrorList {
	p, o := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy), old.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	errs := apivalidation.ValidateObjectMetaUpdate(&p.ObjectMeta, &o.ObjectMeta, field.NewPath("metadata"))
	return append(errs, validateValidatingPolicy(p, o)...)
}

type validatingBindingStrategy struct{}

func (validatingBindingStrategy) PrepareForCreate(obj runtime.Object) {
	b := obj.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
	defaultMatchResources(b.Spec.MatchResources)
	bumpGeneration(&b.ObjectMeta, nil, false)
}

func (validatingBindingStrategy) PrepareForUpdate(obj, old runtime.Object) {
	b, o := obj.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding), old.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
	defaultMatchResources(b.Spec.MatchResources)
	bumpGeneration(&b.ObjectMeta, &o.ObjectMeta, !equality.Semantic.DeepEqual(b.Spec, o.Spec))
}

func (validatingBindingStrategy) Validate(obj runtime.Object) field.ErrorList {
	return validateValidatingBinding(obj.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding))
}

func (validatingBindingStrategy) ValidateUpdate(obj, old runtime.Object) field.ErrorList {
	b, o := obj.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding), old.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
	errs := apivalidation.ValidateObjectMetaUpdate(&b.ObjectMeta, &o.ObjectMeta, field.NewPath("metadata"))
	return append(errs, validateValidatingBinding(b)...)
}

type mutatingPolicyStrategy struct{}

func (mutatingPolicyStrategy) PrepareForCreate(obj runtime.Object) {
	p := obj.(*admissionregistrationv1.MutatingAdmissionPolicy)
	DefaultMutatingAdmissionPolicy(p)
	bumpGeneration(&p.ObjectMeta, nil, false)
}

func (mutatingPolicyStrategy) PrepareForUpdate(obj, old runtime.Object) {
	p, o := obj.(*admissionregistrationv1.MutatingAdmissionPolicy), old.(*admissionregistrationv1.MutatingAdmissionPolicy)
	DefaultMutatingAdmissionPolicy(p)
	bumpGeneration(&p.ObjectMeta, &o.ObjectMeta, !equality.Semantic.DeepEqual(p.Spec, o.Spec))
}

func (mutatingPolicyStrategy) Validate(obj runtime.Object) field.ErrorList {
	return validateMutatingPolicy(obj.(*admissionregistrationv1.MutatingAdmissionPolicy), nil)
}

func (mutatingPolicyStrategy) ValidateUpdate(obj, old runtime.Object) field.ErrorList {
	p, o := obj.(*admissionregistrationv1.MutatingAdmissionPolicy), old.(*admissionregistrationv1.MutatingAdmissionPolicy)
	errs := apivalidation.ValidateObjectMetaUpdate(&p.ObjectMeta, &o.ObjectMeta, field.NewPath("metadata"))
	return append(errs, validateMutatingPolicy(p, o)...)
}

type mutatingBindingStrategy struct{}

func (mutatingBindingStrategy) PrepareForCreate(obj runtime.Object) {
	b := obj.(*admissionregistrationv1.MutatingAdmissionPolicyBinding)
	defaultMatchResources(b.Spec.MatchResources)
	bumpGeneration(&b.ObjectMeta, nil, false)
}

func (mutatingBindingStrategy) PrepareForUpdate(obj, old runtime.Object) {
	b, o := obj.(*admissionregistrationv1.MutatingAdmissionPolicyBinding), old.(*admissionregistrationv1.MutatingAdmissionPolicyBinding)
	defaultMatchResources(b.Spec.MatchResources)
	bumpGeneration(&b.ObjectMeta, &o.ObjectMeta, !equality.Semantic.DeepEqual(b.Spec, o.Spec))
}

func (mutatingBindingStrategy) Validate(obj runtime.Object) field.ErrorList {
	return validateMutatingBinding(obj.(*admissionregistrationv1.MutatingAdmissionPolicyBinding))
}

func (mutatingBindingStrategy) ValidateUpdate(obj, old runtime.Object) field.ErrorList {
	b, o := obj.(*admissionregistrationv1.MutatingAdmissionPolicyBinding), old.(*admissionregistrationv1.MutatingAdmissionPolicyBinding)
	errs := apivalidation.ValidateObjectMetaUpdate(&b.ObjectMeta, &o.ObjectMeta, field.NewPath("metadata"))
	return append(errs, validateMutatingBinding(b)...)
}

type validatingWebhookStrategy struct{}

func (validatingWebhookStrategy) PrepareForCreate(obj runtime.Object) {
	c := obj.(*admissionregistrationv1.ValidatingWebhookConfiguration)
	DefaultValidatingWebhookConfiguration(c)
	bumpGeneration(&c.ObjectMeta, nil, false)
}

func (validatingWebhookStrategy) PrepareForUpdate(obj, old runtime.Object) {
	c, o := obj.(*admissionregistrationv1.ValidatingWebhookConfiguration), old.(*admissionregistrationv1.ValidatingWebhookConfiguration)
	DefaultValidatingWebhookConfiguration(c)
	bumpGeneration(&c.ObjectMeta, &o.ObjectMeta, !equality.Semantic.DeepEqual(c.Webhooks, o.Webhooks))
}

func (validatingWebhookStrategy) Validate(obj runtime.Object) field.ErrorList {
	c := obj.(*admissionregistrationv1.ValidatingWebhookConfiguration)
	return validateWebhookConfiguration(&c.ObjectMeta, validatingWebhooks(c.Webhooks), nil)
}

func (validatingWebhookStrategy) ValidateUpdate(obj, old runtime.Object) field.ErrorList {
	c, o := obj.(*admissionregistrationv1.ValidatingWebhookConfiguration), old.(*admissionregistrationv1.ValidatingWebhookConfiguration)
	errs := apivalidation.ValidateObjectMetaUpdate(&c.ObjectMeta, &o.ObjectMeta, field.NewPath("metadata"))
	return append(errs, validateWebhookConfiguration(&c.ObjectMeta, validatingWebhooks(c.Webhooks), validatingWebhooks(o.Webhooks))...)
}

type mutatingWebhookStrategy struct{}

func (mutatingWebhookStrategy) PrepareForCreate(obj runtime.Object) {
	c := obj.(*admissionregistrationv1.MutatingWebhookConfiguration)
	DefaultMutatingWebhookConfiguration(c)
	bumpGeneration(&c.ObjectMeta, nil, false)
}

func (mutatingWebhookStrategy) PrepareForUpdate(obj, old runtime.Object) {
	c, o := obj.(*admissionregistrationv1.MutatingWebhookConfiguration), old.(*admissionregistrationv1.MutatingWebhookConfiguration)
	DefaultMutatingWebhookConfiguration(c)
	bumpGeneration(&c.ObjectMeta, &o.ObjectMeta, !equality.Semantic.DeepEqual(c.Webhooks, o.Webhooks))
}

func (mutatingWebhookStrategy) Validate(obj runtime.Object) field.ErrorList {
	c := obj.(*admissionregistrationv1.MutatingWebhookConfiguration)
	return validateWebhookConfiguration(&c.ObjectMeta, mutatingWebhooks(c.Webhooks), nil)
}

func (mutatingWebhookStrategy) ValidateUpdate(obj, old runtime.Object) field.ErrorList {
	c, o := obj.(*admissionregistrationv1.MutatingWebhookConfiguration), old.(*admissionregistrationv1.MutatingWebhookConfiguration)
	errs := apivalidation.ValidateObjectMetaUpdate(&c.ObjectMeta, &o.ObjectMeta, field.NewPath("metadata"))
	return append(errs, validateWebhookConfiguration(&c.ObjectMeta, mutatingWebhooks(c.Webhooks), mutatingWebhooks(o.Webhooks))...)
}

// Defaults of admissionregistration/v1, as kube-apiserver sets them.

// DefaultValidatingAdmissionPolicy sets the v1 defaults on p:
// failurePolicy Fail and the defaults of its match constraints.
func DefaultValidatingAdmissionPolicy(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
	if p.Spec.FailurePolicy == nil {
		fp := admissionregistrationv1.Fail
		p.Spec.FailurePolicy = &fp
	}
	defaultMatchResources(p.Spec.MatchConstraints)
}

// DefaultMutatingAdmissionPolicy sets the v1 defaults on p: failurePolicy
// Fail, reinvocationPolicy Never and the defaults of its match
// constraints.
func DefaultMutatingAdmissionPolicy(p *admissionregistrationv1.MutatingAdmissionPolicy) {
	if p.Spec.FailurePolicy == nil {
		fp := admissionregistrationv1.Fail
		p.Spec.FailurePolicy = &fp
	}
	if p.Spec.ReinvocationPolicy == "" {
		p.Spec.ReinvocationPolicy = admissionregistrationv1.NeverReinvocationPolicy
	}
	defaultMatchResources(p.Spec.MatchConstraints)
}

// defaultMatchResources sets matchPolicy Equivalent, empty (match-all)
// selectors and rule scope "*" on m (nil: nothing).
func defaultMatchResources(m *admissionregistrationv1.MatchResources) {
	if m == nil {
		return
	}
	if m.MatchPolicy == nil {
		mp := admissionregistrationv1.Equivalent
		m.MatchPolicy = &mp
	}
	if m.NamespaceSelector == nil {
		m.NamespaceSelector = &metav1.LabelSelector{}
	}
	if m.ObjectSelector == nil {
		m.ObjectSelector = &metav1.LabelSelector{}
	}
	for i := range m.ResourceRules {
		defaultRuleScope(&m.ResourceRules[i].Rule)
	}
	for i := range m.ExcludeResourceRules {
		defaultRuleScope(&m.ExcludeResourceRules[i].Rule)
	}
}

func defaultRuleScope(r *admissionregistrationv1.Rule) {
	if r.Scope == nil {
		s := admissionregistrationv1.AllScopes
		r.Scope = &s
	}
}

// defaultWebhook sets the v1 defaults shared by both webhook kinds.
func defaultWebhook(fp **admissionregistrationv1.FailurePolicyType, mp **admissionregistrationv1.MatchPolicyType,
	ns, obj **metav1.LabelSelector, timeout **int32, cc *admissionregistrationv1.WebhookClientConfig, rules []admissionregistrationv1.RuleWithOperations) {
	if *fp == nil {
		v := admissionregistrationv1.Fail
		*fp = &v
	}
	if *mp == nil {
		v := admissionregistrationv1.Equivalent
		*mp = &v
	}
	if *ns == nil {
		*ns = &metav1.LabelSelector{}
	}
	if *obj == nil {
		*obj = &metav1.LabelSelector{}
	}
	if *timeout == nil {
		v := int32(10)
		*timeout = &v
	}
	if s := cc.Service; s != nil && s.Port == nil {
		p := int32(443)
		s.Port = &p
	}
	for i := range rules {
		defaultRuleScope(&rules[i].Rule)
	}
}

// DefaultValidatingWebhookConfiguration sets the v1 defaults on every
// webhook of c.
func DefaultValidatingWebhookConfiguration(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
	for i := range c.Webhooks {
		w := &c.Webhooks[i]
		defaultWebhook(&w.FailurePolicy, &w.MatchPolicy, &w.NamespaceSelector, &w.ObjectSelector, &w.TimeoutSeconds, &w.ClientConfig, w.Rules)
	}
}

// DefaultMutatingWebhookConfiguration sets the v1 defaults on every
// webhook of c, reinvocationPolicy Never included.
func DefaultMutatingWebhookConfiguration(c *admissionregistrationv1.MutatingWebhookConfiguration) {
	for i := range c.Webhooks {
		w := &c.Webhooks[i]
		defaultWebhook(&w.FailurePolicy, &w.MatchPolicy, &w.NamespaceSelector, &w.ObjectSelector, &w.TimeoutSeconds, &w.ClientConfig, w.Rules)
		if w.ReinvocationPolicy == nil {
			v := admissionregistrationv1.NeverReinvocationPolicy
			w.ReinvocationPolicy = &v
		}
	}
}

// webhookView is what validation reads of either kind of webhook.
type webhookView struct {
	name                    string
	clientConfig            admissionregistrationv1.WebhookClientConfig
	rules                   []admissionregistrationv1.RuleWithOperations
	failurePolicy           *admissionregistrationv1.FailurePolicyType
	matchPolicy             *admissionregistrationv1.MatchPolicyType
	namespaceSelector       *metav1.LabelSelector
	objectSelector          *metav1.LabelSelector
	sideEffects             *admissionregistrationv1.SideEffectClass
	timeoutSeconds          *int32
	admissionReviewVersions []string
	matchConditions         []admissionregistrationv1.MatchCondition
	reinvocationPolicy      *admissionregistrationv1.ReinvocationPolicyType // mutating only
}

func validatingWebhooks(ws []admissionregistrationv1.ValidatingWebhook) []webhookView {
	out := make([]webhookView, len(ws))
	for i, w := range ws {
		out[i] = webhookView{w.Name, w.ClientConfig, w.Rules, w.FailurePolicy, w.MatchPolicy, w.NamespaceSelector, w.ObjectSelector,
			w.SideEffects, w.TimeoutSeconds, w.AdmissionReviewVersions, w.MatchConditions, nil}
	}
	return out
}

func mutatingWebhooks(ws []admissionregistrationv1.MutatingWebhook) []webhookView {
	out := make([]webhookView, len(ws))
	for i, w := range ws {
		out[i] = webhookView{w.Name, w.ClientConfig, w.Rules, w.FailurePolicy, w.MatchPolicy, w.NamespaceSelector, w.ObjectSelector,
			w.SideEffects, w.TimeoutSeconds, w.AdmissionReviewVersions, w.MatchConditions, w.ReinvocationPolicy}
	}
	return out
}
