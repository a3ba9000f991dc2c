package policy

import (
	"reflect"

	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
)

// Mutator is an optional interface of a Policy: Mutating reports whether
// it may change the object. Union runs every mutating policy before the
// others, as kube-apiserver runs its mutating admission (policies, then
// webhooks) before its validating admission.
type Mutator interface {
	Mutating() bool
}

// Union is the Set of several Sets: for a request, the mutating
// policies of each Set in order, then the other policies of each Set in
// order; its scope is the union of theirs.
type Union []Set

// Matching returns the policies of every set, mutating ones first.
func (u Union) Matching(req *admissionv1.AdmitRequest) []Policy {
	var mutating, others []Policy
	for _, s := range u {
		for _, p := range s.Matching(req) {
			if m, ok := p.(Mutator); ok && m.Mutating() {
				mutating = append(mutating, p)
			} else {
				others = append(others, p)
			}
		}
	}
	return append(mutating, others...)
}

// Scope is the union of the sets' scopes, and a channel closed when any
// of them changes (nil when none can).
func (u Union) Scope() (Scope, <-chan struct{}) {
	var out Scope
	var chans []<-chan struct{}
	for _, s := range u {
		sc, ch := s.Scope()
		out.Everything = out.Everything || sc.Everything
		out.Rules = append(out.Rules, sc.Rules...)
		if ch != nil {
			chans = append(chans, ch)
		}
	}
	if out.Everything {
		out.Rules = nil
	}
	switch len(chans) {
	case 0:
		return out, nil
	case 1:
		return out, chans[0]
	}
	changed := make(chan struct{})
	cases := make([]reflect.SelectCase, len(chans))
	for i, ch := range chans {
		cases[i] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)}
	}
	go func() {
		// Each set closes its channel on its next change, so this
		// goroutine ends with the first change of any set.
		reflect.Select(cases)
		close(changed)
	}()
	return out, changed
}

var _ Set = Union(nil)
