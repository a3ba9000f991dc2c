package apf

import (
	"reflect"
	"testing"
)

func TestExemptionsOfMandatoryConfiguration(t *testing.T) {
	c := newController(t, Config{})
	got, changed := c.Exemptions()
	want := []Exemption{{
		FlowSchema: SchemaExempt, FlowSchemaUID: ObjectUID("flowschemas", SchemaExempt),
		PriorityLevel: LevelExempt, PriorityLevelUID: ObjectUID("prioritylevelconfigurations", LevelExempt),
		Groups: []string{GroupMasters},
	}}
	if !reflect.DeepEqual(got, want) || changed == nil {
		t.Fatalf("got %+v (changed %v), want %+v", got, changed, want)
	}
	// Every request of a listed subject is classified there, and exempt.
	for _, d := range []Digest{
		{User: "root", Groups: []string{GroupMasters}, Verb: "create", Resource: "pods", Subresource: "status", Namespace: "x", IsResourceRequest: true},
		{User: "root", Groups: []string{GroupMasters, GroupAuthenticated}, Verb: "get", Path: "/healthz"},
		{User: "root", Groups: []string{"other", GroupMasters}, Verb: "list", APIGroup: "apps", Resource: "deployments", IsResourceRequest: true},
	} {
		s := c.classify(&d)
		if s.Name != SchemaExempt || !s.level.cfg.Exempt {
			t.Errorf("%+v classified %s", d, s.Name)
		}
	}
}

func TestExemptionsStopWhereAGatewayCannotClassify(t *testing.T) {
	exempt := &level{cfg: PriorityLevel{Name: "exempt", Exempt: true}, uid: "pl-exempt"}
	limited := &level{cfg: PriorityLevel{Name: "limited", Seats: 1}, uid: "pl-limited"}
	sch := func(name string, l *level, rules ...Rule) *schema {
		return &schema{FlowSchema: FlowSchema{Name: name, PriorityLevel: l.cfg.Name, Rules: rules}, uid: "fs-" + name, level: l}
	}
	gets := Rule{Subjects: Subjects{Groups: []string{"b"}}, Resources: []ResourceRule{{Verbs: []string{"get"}, APIGroups: []string{"*"}, Resources: []string{"*"}, Namespaces: []string{"*"}}}}
	entry := func(name string, users, groups []string) Exemption {
		return Exemption{FlowSchema: name, FlowSchemaUID: "fs-" + name, PriorityLevel: "exempt", PriorityLevelUID: "pl-exempt", Users: users, Groups: groups}
	}
	tests := []struct {
		name    string
		schemas []*schema
		want    []Exemption
	}{
		{"limited first", []*schema{sch("l", limited, everything(Subjects{Groups: []string{"a"}})), sch("e", exempt, everything(Subjects{Groups: []string{"b"}}))}, nil},
		{
			"everything rules of several schemas",
			[]*schema{
				sch("e1", exempt, everything(Subjects{Users: []string{"alice"}, Groups: []string{"a"}})),
				sch("e2", exempt, everything(Subjects{Groups: []string{"b"}})),
				sch("l", limited, everything(Subjects{Groups: []string{"c"}})),
			},
			[]Exemption{entry("e1", []string{"alice"}, []string{"a"}), entry("e2", nil, []string{"b"})},
		},
		{
			"a narrower rule ends the walk after its schema",
			[]*schema{
				sch("e1", exempt, everything(Subjects{Groups: []string{"a"}}), gets),
				sch("e2", exempt, everything(Subjects{Groups: []string{"c"}})),
			},
			[]Exemption{entry("e1", nil, []string{"a"})},
		},
		{
			"implicit groups and stars end the walk",
			[]*schema{
				sch("e1", exempt, everything(Subjects{Groups: []string{GroupAuthenticated}})),
				sch("e2", exempt, everything(Subjects{Groups: []string{"c"}})),
			},
			nil,
		},
		{"star users", []*schema{sch("e1", exempt, everything(Subjects{Users: []string{"*"}}))}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := exemptions(tc.schemas); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
