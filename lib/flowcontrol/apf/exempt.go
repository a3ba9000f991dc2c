package apf

import "slices"

// Exemption is a flow schema of an exempt priority level that classifies
// every request of its subjects: a gateway may serve those requests
// without Acquire, which would return an exempt grant of this schema (and
// hold nothing). See Controller.Exemptions.
type Exemption struct {
	FlowSchema, FlowSchemaUID       string
	PriorityLevel, PriorityLevelUID string
	// Users match by name; Groups match among the request's groups. Neither
	// holds "*" or an implicit group (system:authenticated,
	// system:unauthenticated), so a gateway matches them as given.
	Users, Groups []string
}

// Exemptions returns the callers whose every request is exempt, in
// classification order (a request takes the first that matches it), and a
// channel closed when the configuration changes. See exemptions for which
// schemas qualify.
func (c *Controller) Exemptions() ([]Exemption, <-chan struct{}) {
	s := c.cur.Load()
	return s.exemptions, s.changed
}

// exemptions lists the exempt schemas a gateway may classify by itself:
// walking schemas in classification order, each schema of an exempt level
// contributes the explicit subjects of its rules that match everything,
// and the walk stops at the first schema that is not of an exempt level or
// that could also match requests it does not describe that way (a rule
// narrower than everything, or subjects a gateway cannot match as given:
// "*" or an implicit group). So no listed subject's request can be
// classified by a schema other than the one listed for it.
func exemptions(schemas []*schema) []Exemption {
	var out []Exemption
	for _, s := range schemas {
		if !s.level.cfg.Exempt {
			break
		}
		e := Exemption{
			FlowSchema: s.Name, FlowSchemaUID: s.uid,
			PriorityLevel: s.level.cfg.Name, PriorityLevelUID: s.level.uid,
		}
		complete := true
		for _, r := range s.Rules {
			if !r.everything() || !r.Subjects.explicit() {
				complete = false
				continue
			}
			e.Users = append(e.Users, r.Subjects.Users...)
			for _, sa := range r.Subjects.ServiceAccounts {
				e.Users = append(e.Users, sa.user())
			}
			e.Groups = append(e.Groups, r.Subjects.Groups...)
		}
		if len(e.Users)+len(e.Groups) > 0 {
			out = append(out, e)
		}
		if !complete {
			break
		}
	}
	return out
}

// everything reports whether r matches every request of its subjects.
func (r Rule) everything() bool {
	resources := slices.ContainsFunc(r.Resources, func(rr ResourceRule) bool {
		return slices.Contains(rr.Verbs, "*") && slices.Contains(rr.APIGroups, "*") && slices.Contains(rr.Resources, "*") &&
			slices.Contains(rr.Namespaces, "*") && rr.ClusterScope
	})
	nonResources := slices.ContainsFunc(r.NonResources, func(nr NonResourceRule) bool {
		return slices.Contains(nr.Verbs, "*") && slices.Contains(nr.URLs, "*")
	})
	return resources && nonResources
}

// explicit reports whether s names its subjects one by one, as a gateway
// can match them without the classifier's implicit groups (a named
// service account is its user name; "*" service accounts are not).
func (s Subjects) explicit() bool {
	if slices.Contains(s.Users, "*") {
		return false
	}
	for _, sa := range s.ServiceAccounts {
		if sa.Name == "*" {
			return false
		}
	}
	for _, g := range s.Groups {
		if g == "*" || g == GroupAuthenticated || g == GroupUnauthenticated {
			return false
		}
	}
	return true
}
