package registry

import (
	"slices"
	"testing"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/meridian-cp/meridian/lib/kube/apfbootstrap"
)

// TestFlowControlValidation: kube-apiserver's rules for FlowSchemas and
// PriorityLevelConfigurations, the mandatory objects' guardrails
// included; every bootstrap object is valid.
func TestFlowControlValidation(t *testing.T) {
	user := flowcontrolv1.Subject{Kind: flowcontrolv1.SubjectKindUser, User: &flowcontrolv1.UserSubject{Name: "alice"}}
	fs := func(f func(*flowcontrolv1.FlowSchema)) runtime.Object {
		o := &flowcontrolv1.FlowSchema{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: "pl"},
			MatchingPrecedence:         500,
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: []flowcontrolv1.Subject{user},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{
					Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods"}, Namespaces: []string{"ns"},
				}},
			}},
		}}
		f(o)
		return o
	}
	pl := func(f func(*flowcontrolv1.PriorityLevelConfiguration)) runtime.Object {
		o := &flowcontrolv1.PriorityLevelConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: flowcontrolv1.PriorityLevelConfigurationSpec{
			Type: flowcontrolv1.PriorityLevelEnablementLimited,
			Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{LimitResponse: flowcontrolv1.LimitResponse{
				Type: flowcontrolv1.LimitResponseTypeQueue, Queuing: &flowcontrolv1.QueuingConfiguration{Queues: 64, HandSize: 8, QueueLengthLimit: 50},
			}},
		}}
		f(o)
		return o
	}
	for _, tc := range []struct {
		name     string
		strategy Strategy
		obj      runtime.Object
		want     []string
	}{
		{"valid flow schema", flowSchemaStrategy{}, fs(func(*flowcontrolv1.FlowSchema) {}), []string{}},
		{"precedence", flowSchemaStrategy{}, fs(func(o *flowcontrolv1.FlowSchema) { o.Spec.MatchingPrecedence = 10001 }), []string{"FieldValueInvalid spec.matchingPrecedence"}},
		{"no level", flowSchemaStrategy{}, fs(func(o *flowcontrolv1.FlowSchema) { o.Spec.PriorityLevelConfiguration.Name = "" }), []string{"FieldValueRequired spec.priorityLevelConfiguration.name"}},
		{"distinguisher", flowSchemaStrategy{}, fs(func(o *flowcontrolv1.FlowSchema) {
			o.Spec.DistinguisherMethod = &flowcontrolv1.FlowDistinguisherMethod{Type: "ByGroup"}
		}), []string{"FieldValueNotSupported spec.distinguisherMethod.type"}},
		{"subject", flowSchemaStrategy{}, fs(func(o *flowcontrolv1.FlowSchema) {
			o.Spec.Rules[0].Subjects = []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindServiceAccount, ServiceAccount: &flowcontrolv1.ServiceAccountSubject{Name: "*"}}}
		}), []string{"FieldValueRequired spec.rules[0].subjects[0].serviceAccount.namespace"}},
		{"wildcard verbs", flowSchemaStrategy{}, fs(func(o *flowcontrolv1.FlowSchema) { o.Spec.Rules[0].ResourceRules[0].Verbs = []string{"*", "get"} }),
			[]string{"FieldValueInvalid spec.rules[0].resourceRules[0].verbs"}},
		{"namespaces", flowSchemaStrategy{}, fs(func(o *flowcontrolv1.FlowSchema) { o.Spec.Rules[0].ResourceRules[0].Namespaces = nil }),
			[]string{"FieldValueRequired spec.rules[0].resourceRules[0].namespaces"}},
		{"no rules", flowSchemaStrategy{}, fs(func(o *flowcontrolv1.FlowSchema) { o.Spec.Rules[0].ResourceRules = nil }), []string{"FieldValueRequired spec.rules[0]"}},
		{"url", flowSchemaStrategy{}, fs(func(o *flowcontrolv1.FlowSchema) {
			o.Spec.Rules[0].NonResourceRules = []flowcontrolv1.NonResourcePolicyRule{{Verbs: []string{"get"}, NonResourceURLs: []string{"healthz", "/a*"}}}
		}), []string{"FieldValueInvalid spec.rules[0].nonResourceRules[0].nonResourceURLs[0]", "FieldValueInvalid spec.rules[0].nonResourceRules[0].nonResourceURLs[1]"}},
		{"mandatory flow schema", flowSchemaStrategy{}, func() runtime.Object {
			o := apfbootstrap.MandatoryFlowSchemas()[0]
			o.Spec.MatchingPrecedence = 2
			return o
		}(), []string{"FieldValueInvalid spec"}},

		{"valid level", priorityLevelStrategy{}, pl(func(*flowcontrolv1.PriorityLevelConfiguration) {}), []string{}},
		{"exempt name", priorityLevelStrategy{}, pl(func(o *flowcontrolv1.PriorityLevelConfiguration) {
			o.Spec = flowcontrolv1.PriorityLevelConfigurationSpec{Type: flowcontrolv1.PriorityLevelEnablementExempt}
		}), []string{"FieldValueInvalid spec.type"}},
		{"hand size", priorityLevelStrategy{}, pl(func(o *flowcontrolv1.PriorityLevelConfiguration) {
			o.Spec.Limited.LimitResponse.Queuing.HandSize = 65
		}), []string{"FieldValueInvalid spec.limited.limitResponse.queuing.handSize"}},
		{"entropy", priorityLevelStrategy{}, pl(func(o *flowcontrolv1.PriorityLevelConfiguration) {
			o.Spec.Limited.LimitResponse.Queuing.HandSize = 12
		}), []string{"FieldValueInvalid spec.limited.limitResponse.queuing.handSize"}},
		{"reject with queuing", priorityLevelStrategy{}, pl(func(o *flowcontrolv1.PriorityLevelConfiguration) {
			o.Spec.Limited.LimitResponse.Type = flowcontrolv1.LimitResponseTypeReject
		}), []string{"FieldValueForbidden spec.limited.limitResponse.queuing"}},
		{"lendable", priorityLevelStrategy{}, pl(func(o *flowcontrolv1.PriorityLevelConfiguration) {
			o.Spec.Limited.LendablePercent = new(int32(101))
		}), []string{"FieldValueInvalid spec.limited.lendablePercent"}},
		{"mandatory catch-all", priorityLevelStrategy{}, pl(func(o *flowcontrolv1.PriorityLevelConfiguration) { o.Name = "catch-all" }),
			[]string{"FieldValueInvalid spec"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.strategy.PrepareForCreate(tc.obj)
			got := fieldErrors(tc.strategy.Validate(tc.obj))
			if !slices.Equal(got, tc.want) {
				t.Errorf("errors %v, want %v", got, tc.want)
			}
		})
	}
	for _, o := range apfbootstrap.FlowSchemas() {
		if errs := (flowSchemaStrategy{}).Validate(o); len(errs) > 0 {
			t.Errorf("bootstrap %s: %v", o.Name, errs)
		}
	}
	for _, o := range apfbootstrap.PriorityLevels() {
		(priorityLevelStrategy{}).PrepareForCreate(o)
		if errs := (priorityLevelStrategy{}).Validate(o); len(errs) > 0 {
			t.Errorf("bootstrap %s: %v", o.Name, errs)
		}
	}
}
