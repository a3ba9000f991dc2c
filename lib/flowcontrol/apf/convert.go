package apf

import (
	"cmp"
	"math"
	"slices"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"

	"github.com/meridian-cp/meridian/lib/kube/apfbootstrap"
)

// Configuration is what the Controller serves: flow schemas and the
// priority levels they name, as Convert makes them from the objects.
type Configuration struct {
	Schemas []FlowSchema
	Levels  []PriorityLevel
}

// Convert turns FlowSchema and PriorityLevelConfiguration objects into a
// Configuration, as kube-apiserver's configuration controller digests
// them:
//
//   - a mandatory object (exempt, catch-all) that is missing is served
//     as apfbootstrap has it, so every request is classified;
//   - a flow schema whose priority level does not exist (Dangling) is
//     left out;
//   - each limited level's nominal concurrency limit is
//     ceil(serverLimit × its nominalConcurrencyShares / the sum of every
//     level's shares, the exempt level's included); it may lend
//     round(nominal × lendablePercent / 100) and borrow
//     round(nominal × borrowingLimitPercent / 100) (unset: serverLimit),
//     and starts at its nominal limit less half what it may lend
//     (borrow.go adjusts it);
//   - UIDs are the objects' metadata.uid, or a stable one (ObjectUID)
//     for an object without one (the bootstrap objects served before any
//     is read).
func Convert(schemas []*flowcontrolv1.FlowSchema, levels []*flowcontrolv1.PriorityLevelConfiguration, serverLimit int) Configuration {
	levels = withMandatory(levels, apfbootstrap.MandatoryPriorityLevels(), func(pl *flowcontrolv1.PriorityLevelConfiguration) string { return pl.Name })
	schemas = withMandatory(schemas, apfbootstrap.MandatoryFlowSchemas(), func(fs *flowcontrolv1.FlowSchema) string { return fs.Name })

	var sum int64
	for _, pl := range levels {
		sum += int64(shares(pl))
	}
	var out Configuration
	exists := map[string]bool{}
	for _, pl := range levels {
		exists[pl.Name] = true
		l := PriorityLevel{Name: pl.Name, UID: cmp.Or(string(pl.UID), ObjectUID("prioritylevelconfigurations", pl.Name))}
		switch {
		case pl.Spec.Type == flowcontrolv1.PriorityLevelEnablementExempt:
			l.Exempt = true
		case pl.Spec.Limited != nil:
			if sum > 0 {
				l.Nominal = int((int64(serverLimit)*int64(shares(pl)) + sum - 1) / sum)
			}
			lim := pl.Spec.Limited
			lendable := int(math.Round(float64(l.Nominal) * float64(percent(lim.LendablePercent)) / 100))
			borrowing := serverLimit
			if lim.BorrowingLimitPercent != nil {
				borrowing = int(math.Round(float64(l.Nominal) * float64(max(*lim.BorrowingLimitPercent, 0)) / 100))
			}
			l.MinSeats, l.MaxSeats = l.Nominal-lendable, l.Nominal+borrowing
			l.Seats = l.Nominal - lendable/2 // as kube-apiserver starts a level
			if q := pl.Spec.Limited.LimitResponse.Queuing; pl.Spec.Limited.LimitResponse.Type == flowcontrolv1.LimitResponseTypeQueue && q != nil {
				l.Queuing = &Queuing{Queues: int(q.Queues), HandSize: int(q.HandSize), QueueLengthLimit: int(q.QueueLengthLimit)}
			}
		}
		out.Levels = append(out.Levels, l)
	}
	for _, fs := range schemas {
		if !exists[fs.Spec.PriorityLevelConfiguration.Name] {
			continue
		}
		s := FlowSchema{
			Name: fs.Name, UID: cmp.Or(string(fs.UID), ObjectUID("flowschemas", fs.Name)),
			MatchingPrecedence: int(fs.Spec.MatchingPrecedence), PriorityLevel: fs.Spec.PriorityLevelConfiguration.Name,
		}
		if dm := fs.Spec.DistinguisherMethod; dm != nil {
			switch dm.Type {
			case flowcontrolv1.FlowDistinguisherMethodByUserType:
				s.Distinguisher = DistinguishByUser
			case flowcontrolv1.FlowDistinguisherMethodByNamespaceType:
				s.Distinguisher = DistinguishByNamespace
			}
		}
		for _, r := range fs.Spec.Rules {
			s.Rules = append(s.Rules, convertRule(&r))
		}
		out.Schemas = append(out.Schemas, s)
	}
	return out
}

// withMandatory returns objs plus the mandatory ones it lacks.
func withMandatory[T any](objs, mandatory []T, name func(T) string) []T {
	out := slices.Clip(objs)
	for _, m := range mandatory {
		if !slices.ContainsFunc(objs, func(o T) bool { return name(o) == name(m) }) {
			out = append(out, m)
		}
	}
	return out
}

// percent is a defaulted percentage: nil counts as 0.
func percent(p *int32) int32 {
	if p == nil {
		return 0
	}
	return min(max(*p, 0), 100)
}

// shares returns a level's nominal concurrency shares (defaulted objects
// always have them; a missing value counts as none).
func shares(pl *flowcontrolv1.PriorityLevelConfiguration) int32 {
	var p *int32
	switch {
	case pl.Spec.Limited != nil:
		p = pl.Spec.Limited.NominalConcurrencyShares
	case pl.Spec.Exempt != nil:
		p = pl.Spec.Exempt.NominalConcurrencyShares
	}
	if p == nil || *p < 0 {
		return 0
	}
	return *p
}

func convertRule(r *flowcontrolv1.PolicyRulesWithSubjects) Rule {
	var out Rule
	for _, s := range r.Subjects {
		switch {
		case s.Kind == flowcontrolv1.SubjectKindUser && s.User != nil:
			out.Subjects.Users = append(out.Subjects.Users, s.User.Name)
		case s.Kind == flowcontrolv1.SubjectKindGroup && s.Group != nil:
			out.Subjects.Groups = append(out.Subjects.Groups, s.Group.Name)
		case s.Kind == flowcontrolv1.SubjectKindServiceAccount && s.ServiceAccount != nil:
			out.Subjects.ServiceAccounts = append(out.Subjects.ServiceAccounts, ServiceAccount{Namespace: s.ServiceAccount.Namespace, Name: s.ServiceAccount.Name})
		}
	}
	for _, rr := range r.ResourceRules {
		out.Resources = append(out.Resources, ResourceRule{
			Verbs: rr.Verbs, APIGroups: rr.APIGroups, Resources: rr.Resources, Namespaces: rr.Namespaces, ClusterScope: rr.ClusterScope,
		})
	}
	for _, nr := range r.NonResourceRules {
		out.NonResources = append(out.NonResources, NonResourceRule{Verbs: nr.Verbs, URLs: nr.NonResourceURLs})
	}
	return out
}

// Bootstrap is the configuration of the mandatory and suggested objects,
// served until the stored objects are read.
func Bootstrap(serverLimit int) Configuration {
	return Convert(apfbootstrap.FlowSchemas(), apfbootstrap.PriorityLevels(), serverLimit)
}
