package registry

import (
	"fmt"
	"slices"
	"strings"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/api/validation/path"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/meridian-cp/meridian/lib/kube/apfbootstrap"
)

// Limits of flowcontrol/v1 specs, as kube-apiserver validates them.
const (
	maxMatchingPrecedence = 10000
	maxQueues             = 512
	// handEntropyBits bounds queues and hand size together:
	// ceil(log2(queues)) * handSize may not exceed it.
	handEntropyBits = 60
)

// pathSegmentName validates names of flowcontrol objects: any path
// segment, as kube-apiserver's ValidateFlowSchemaName does.
func pathSegmentName(name string, _ bool) []string { return path.IsValidPathSegmentName(name) }

func validateFlowSchema(fs *flowcontrolv1.FlowSchema) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&fs.ObjectMeta, false, pathSegmentName, field.NewPath("metadata"))
	spec := field.NewPath("spec")
	if mand := mandatoryFlowSchema(fs.Name); mand != nil && !equality.Semantic.DeepEqual(mand.Spec, fs.Spec) {
		errs = append(errs, field.Invalid(spec, fs.Spec, fmt.Sprintf("spec of '%s' must equal the fixed value", fs.Name)))
	}
	switch p := fs.Spec.MatchingPrecedence; {
	case p <= 0:
		errs = append(errs, field.Invalid(spec.Child("matchingPrecedence"), p, "must be a positive value"))
	case p > maxMatchingPrecedence:
		errs = append(errs, field.Invalid(spec.Child("matchingPrecedence"), p, fmt.Sprintf("must not be greater than %d", maxMatchingPrecedence)))
	}
	if dm := fs.Spec.DistinguisherMethod; dm != nil {
		p := spec.Child("distinguisherMethod", "type")
		switch dm.Type {
		case flowcontrolv1.FlowDistinguisherMethodByUserType, flowcontrolv1.FlowDistinguisherMethodByNamespaceType:
		case "":
			errs = append(errs, field.Required(p, ""))
		default:
			errs = append(errs, field.NotSupported(p, dm.Type, []string{string(flowcontrolv1.FlowDistinguisherMethodByUserType), string(flowcontrolv1.FlowDistinguisherMethodByNamespaceType)}))
		}
	}
	plPath := spec.Child("priorityLevelConfiguration", "name")
	if pl := fs.Spec.PriorityLevelConfiguration.Name; pl == "" {
		errs = append(errs, field.Required(plPath, "must reference a priority level"))
	} else {
		for _, msg := range path.IsValidPathSegmentName(pl) {
			errs = append(errs, field.Invalid(plPath, pl, msg))
		}
	}
	for i, r := range fs.Spec.Rules {
		errs = append(errs, validatePolicyRules(&r, spec.Child("rules").Index(i))...)
	}
	return errs
}

func validatePolicyRules(r *flowcontrolv1.PolicyRulesWithSubjects, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(r.Subjects) == 0 {
		errs = append(errs, field.Required(p.Child("subjects"), "subjects must contain at least one value"))
	}
	for i, s := range r.Subjects {
		errs = append(errs, validateFlowSubject(&s, p.Child("subjects").Index(i))...)
	}
	if len(r.ResourceRules) == 0 && len(r.NonResourceRules) == 0 {
		errs = append(errs, field.Required(p, "at least one of resourceRules and nonResourceRules has to be non-empty"))
	}
	for i, rr := range r.ResourceRules {
		errs = append(errs, validateResourceRule(&rr, p.Child("resourceRules").Index(i))...)
	}
	for i, nr := range r.NonResourceRules {
		errs = append(errs, validateNonResourceRule(&nr, p.Child("nonResourceRules").Index(i))...)
	}
	return errs
}

func validateFlowSubject(s *flowcontrolv1.Subject, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	required := func(child string, name string) {
		if name == "" {
			errs = append(errs, field.Required(p.Child(child, "name"), fmt.Sprintf("%s name is required", child)))
		}
	}
	forbid := func(child string, set bool) {
		if set {
			errs = append(errs, field.Forbidden(p.Child(child), fmt.Sprintf("%s is forbidden when subject kind is not '%s'", child, childKind[child])))
		}
	}
	switch s.Kind {
	case flowcontrolv1.SubjectKindServiceAccount:
		forbid("user", s.User != nil)
		forbid("group", s.Group != nil)
		if s.ServiceAccount == nil {
			errs = append(errs, field.Required(p.Child("serviceAccount"), "serviceAccount is required when subject kind is 'ServiceAccount'"))
			break
		}
		required("serviceAccount", s.ServiceAccount.Name)
		if ns := s.ServiceAccount.Namespace; ns == "" {
			errs = append(errs, field.Required(p.Child("serviceAccount", "namespace"), "serviceAccount namespace is required"))
		} else {
			for _, msg := range apivalidation.ValidateNamespaceName(ns, false) {
				errs = append(errs, field.Invalid(p.Child("serviceAccount", "namespace"), ns, msg))
			}
		}
	case flowcontrolv1.SubjectKindUser:
		forbid("group", s.Group != nil)
		forbid("serviceAccount", s.ServiceAccount != nil)
		if s.User == nil {
			errs = append(errs, field.Required(p.Child("user"), "user is required when subject kind is 'User'"))
			break
		}
		required("user", s.User.Name)
	case flowcontrolv1.SubjectKindGroup:
		forbid("user", s.User != nil)
		forbid("serviceAccount", s.ServiceAccount != nil)
		if s.Group == nil {
			errs = append(errs, field.Required(p.Child("group"), "group is required when subject kind is 'Group'"))
			break
		}
		required("group", s.Group.Name)
	default:
		errs = append(errs, field.NotSupported(p.Child("kind"), s.Kind, []string{string(flowcontrolv1.SubjectKindServiceAccount), string(flowcontrolv1.SubjectKindGroup), string(flowcontrolv1.SubjectKindUser)}))
	}
	return errs
}

var childKind = map[string]string{"user": "User", "group": "Group", "serviceAccount": "ServiceAccount"}

// wildcardList checks a list that must not be empty and that holds "*"
// only alone.
func wildcardList(list []string, p *field.Path, what string) field.ErrorList {
	if len(list) == 0 {
		return field.ErrorList{field.Required(p, fmt.Sprintf("%s must contain at least one value", what))}
	}
	if len(list) > 1 && slices.Contains(list, "*") {
		return field.ErrorList{field.Invalid(p, list, fmt.Sprintf("if '*' is present, must not specify other %s", what))}
	}
	return nil
}

func validateResourceRule(r *flowcontrolv1.ResourcePolicyRule, p *field.Path) field.ErrorList {
	errs := wildcardList(r.Verbs, p.Child("verbs"), "verbs")
	errs = append(errs, wildcardList(r.APIGroups, p.Child("apiGroups"), "api groups")...)
	errs = append(errs, wildcardList(r.Resources, p.Child("resources"), "resources")...)
	if len(r.Namespaces) == 0 {
		if !r.ClusterScope {
			errs = append(errs, field.Required(p.Child("namespaces"), "resource rules that are not cluster scoped must supply at least one namespace"))
		}
		return errs
	}
	if len(r.Namespaces) > 1 && slices.Contains(r.Namespaces, "*") {
		errs = append(errs, field.Invalid(p.Child("namespaces"), r.Namespaces, "if '*' is present, must not specify other namespaces"))
	}
	for i, ns := range r.Namespaces {
		if ns == "*" {
			continue
		}
		for _, msg := range validation.IsDNS1123Label(ns) {
			errs = append(errs, field.Invalid(p.Child("namespaces").Index(i), ns, msg))
		}
	}
	return errs
}

func validateNonResourceRule(r *flowcontrolv1.NonResourcePolicyRule, p *field.Path) field.ErrorList {
	errs := wildcardList(r.Verbs, p.Child("verbs"), "verbs")
	errs = append(errs, wildcardList(r.NonResourceURLs, p.Child("nonResourceURLs"), "non-resource urls")...)
	for i, u := range r.NonResourceURLs {
		if u == "*" {
			continue
		}
		up := p.Child("nonResourceURLs").Index(i)
		switch {
		case !strings.HasPrefix(u, "/"):
			errs = append(errs, field.Invalid(up, u, "must start with slash"))
		case strings.Contains(u, "//"):
			errs = append(errs, field.Invalid(up, u, "must not contain double slash"))
		case strings.Contains(strings.TrimSuffix(u, "/*"), "*"):
			errs = append(errs, field.Invalid(up, u, "if '*' is present it must be at the end following a slash"))
		}
	}
	return errs
}

func validatePriorityLevel(pl *flowcontrolv1.PriorityLevelConfiguration) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&pl.ObjectMeta, false, pathSegmentName, field.NewPath("metadata"))
	spec := field.NewPath("spec")
	if mand := mandatoryPriorityLevel(pl.Name); mand != nil {
		want, got := mand.Spec, *pl.Spec.DeepCopy()
		msg := fmt.Sprintf("spec of '%s' must equal the fixed value", pl.Name)
		if pl.Name == apfbootstrap.Exempt {
			want.Exempt, got.Exempt = nil, nil
			msg = fmt.Sprintf("spec of '%s' except the 'spec.exempt' field must equal the fixed value", pl.Name)
		}
		if !equality.Semantic.DeepEqual(want, got) {
			errs = append(errs, field.Invalid(spec, pl.Spec, msg))
		}
	}
	if (pl.Spec.Type == flowcontrolv1.PriorityLevelEnablementExempt) != (pl.Name == apfbootstrap.Exempt) {
		errs = append(errs, field.Invalid(spec.Child("type"), pl.Spec.Type, "type must be 'Exempt' if and only if name is 'exempt'"))
	}
	switch pl.Spec.Type {
	case flowcontrolv1.PriorityLevelEnablementExempt:
		if pl.Spec.Limited != nil {
			errs = append(errs, field.Forbidden(spec.Child("limited"), "must be nil if the type is not Limited"))
		}
		if e := pl.Spec.Exempt; e != nil {
			errs = append(errs, nonNegative(e.NominalConcurrencyShares, spec.Child("exempt", "nominalConcurrencyShares"))...)
			errs = append(errs, percent(e.LendablePercent, spec.Child("exempt", "lendablePercent"))...)
		}
	case flowcontrolv1.PriorityLevelEnablementLimited:
		if pl.Spec.Exempt != nil {
			errs = append(errs, field.Forbidden(spec.Child("exempt"), "must be nil if the type is Limited"))
		}
		l := pl.Spec.Limited
		if l == nil {
			errs = append(errs, field.Required(spec.Child("limited"), "must not be empty when type is Limited"))
			break
		}
		lp := spec.Child("limited")
		errs = append(errs, nonNegative(l.NominalConcurrencyShares, lp.Child("nominalConcurrencyShares"))...)
		errs = append(errs, percent(l.LendablePercent, lp.Child("lendablePercent"))...)
		if b := l.BorrowingLimitPercent; b != nil && *b < 0 {
			errs = append(errs, field.Invalid(lp.Child("borrowingLimitPercent"), *b, "if specified, must be a non-negative integer"))
		}
		errs = append(errs, validateLimitResponse(&l.LimitResponse, lp.Child("limitResponse"))...)
	case "":
		errs = append(errs, field.Required(spec.Child("type"), "must not be empty"))
	default:
		errs = append(errs, field.NotSupported(spec.Child("type"), pl.Spec.Type, []string{string(flowcontrolv1.PriorityLevelEnablementExempt), string(flowcontrolv1.PriorityLevelEnablementLimited)}))
	}
	return errs
}

func nonNegative(v *int32, p *field.Path) field.ErrorList {
	if v != nil && *v < 0 {
		return field.ErrorList{field.Invalid(p, *v, "must be a non-negative integer")}
	}
	return nil
}

func percent(v *int32, p *field.Path) field.ErrorList {
	if v != nil && (*v < 0 || *v > 100) {
		return field.ErrorList{field.Invalid(p, *v, "must be between 0 and 100, inclusive")}
	}
	return nil
}

func validateLimitResponse(lr *flowcontrolv1.LimitResponse, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch lr.Type {
	case flowcontrolv1.LimitResponseTypeReject:
		if lr.Queuing != nil {
			errs = append(errs, field.Forbidden(p.Child("queuing"), "must be nil if limited.limitResponse.type is not Limited"))
		}
	case flowcontrolv1.LimitResponseTypeQueue:
		q := lr.Queuing
		if q == nil {
			errs = append(errs, field.Required(p.Child("queuing"), "must not be empty if limited.limitResponse.type is Limited"))
			break
		}
		qp := p.Child("queuing")
		if q.QueueLengthLimit <= 0 {
			errs = append(errs, field.Invalid(qp.Child("queueLengthLimit"), q.QueueLengthLimit, "must be positive"))
		}
		if q.Queues <= 0 {
			errs = append(errs, field.Invalid(qp.Child("queues"), q.Queues, "must be positive"))
		} else if q.Queues > maxQueues {
			errs = append(errs, field.Invalid(qp.Child("queues"), q.Queues, fmt.Sprintf("must not be greater than %d", maxQueues)))
		}
		switch {
		case q.HandSize <= 0:
			errs = append(errs, field.Invalid(qp.Child("handSize"), q.HandSize, "must be positive"))
		case q.HandSize > q.Queues:
			errs = append(errs, field.Invalid(qp.Child("handSize"), q.HandSize, fmt.Sprintf("should not be greater than queues (%d)", q.Queues)))
		case q.Queues > 0 && bitsFor(int(q.Queues))*int(q.HandSize) > handEntropyBits:
			errs = append(errs, field.Invalid(qp.Child("handSize"), q.HandSize,
				fmt.Sprintf("required entropy bits of deckSize %d and handSize %d should not be greater than %d", q.Queues, q.HandSize, handEntropyBits)))
		}
	case "":
		errs = append(errs, field.Required(p.Child("type"), "must not be empty"))
	default:
		errs = append(errs, field.NotSupported(p.Child("type"), lr.Type, []string{string(flowcontrolv1.LimitResponseTypeReject), string(flowcontrolv1.LimitResponseTypeQueue)}))
	}
	return errs
}

// bitsFor is ceil(log2(n)): the hash bits one card of a deck of n takes.
func bitsFor(n int) int {
	b := 0
	for (1 << b) < n {
		b++
	}
	return b
}
