package registry

import (
	"strconv"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/meridian-cp/meridian/lib/kube/apfbootstrap"
)

// FlowControl returns the flowcontrol.apiserver.k8s.io/v1 resources:
// FlowSchemas and PriorityLevelConfigurations, cluster-scoped, with a
// status subresource, defaulted and validated as kube-apiserver does
// (flowcontrol_validation.go).
func FlowControl() []*Resource {
	gv := flowcontrolv1.SchemeGroupVersion
	return []*Resource{
		{
			GVR: gv.WithResource("flowschemas"), Kind: "FlowSchema", ListKind: "FlowSchemaList",
			SingularName: "flowschema", Verbs: CRUDVerbs, Subresources: []string{"status"},
			New: func() runtime.Object { return &flowcontrolv1.FlowSchema{} }, NewList: func() runtime.Object { return &flowcontrolv1.FlowSchemaList{} },
			Strategy: flowSchemaStrategy{},
			Columns:  flowSchemaColumns(),
		},
		{
			GVR: gv.WithResource("prioritylevelconfigurations"), Kind: "PriorityLevelConfiguration", ListKind: "PriorityLevelConfigurationList",
			SingularName: "prioritylevelconfiguration", Verbs: CRUDVerbs, Subresources: []string{"status"},
			New:      func() runtime.Object { return &flowcontrolv1.PriorityLevelConfiguration{} },
			NewList:  func() runtime.Object { return &flowcontrolv1.PriorityLevelConfigurationList{} },
			Strategy: priorityLevelStrategy{},
			Columns:  priorityLevelColumns(),
		},
	}
}

// flowSchemaColumns are kubectl's columns of FlowSchemas, as
// kube-apiserver prints them.
func flowSchemaColumns() []Column {
	fs := func(obj runtime.Object) *flowcontrolv1.FlowSchema { return obj.(*flowcontrolv1.FlowSchema) }
	return []Column{{
		Definition: metav1.TableColumnDefinition{Name: "PriorityLevel", Type: "string", Description: "Name of the PriorityLevelConfiguration the requests are assigned to"},
		Cell:       func(obj runtime.Object, _ time.Time) any { return fs(obj).Spec.PriorityLevelConfiguration.Name },
	}, {
		Definition: metav1.TableColumnDefinition{Name: "MatchingPrecedence", Type: "string", Description: "Lower is matched first"},
		Cell:       func(obj runtime.Object, _ time.Time) any { return strconv.Itoa(int(fs(obj).Spec.MatchingPrecedence)) },
	}, {
		Definition: metav1.TableColumnDefinition{Name: "DistinguisherMethod", Type: "string", Description: "How flows are told apart"},
		Cell: func(obj runtime.Object, _ time.Time) any {
			if dm := fs(obj).Spec.DistinguisherMethod; dm != nil {
				return string(dm.Type)
			}
			return "<none>"
		},
	}, AgeColumn, {
		Definition: metav1.TableColumnDefinition{Name: "MissingPL", Type: "string", Description: "Whether the referenced PriorityLevelConfiguration is missing (the Dangling condition)"},
		Cell: func(obj runtime.Object, _ time.Time) any {
			for _, c := range fs(obj).Status.Conditions {
				if c.Type == flowcontrolv1.FlowSchemaConditionDangling {
					return string(c.Status)
				}
			}
			return "?"
		},
	}}
}

// priorityLevelColumns are kubectl's columns of PriorityLevelConfigurations.
func priorityLevelColumns() []Column {
	limited := func(obj runtime.Object) *flowcontrolv1.LimitedPriorityLevelConfiguration {
		return obj.(*flowcontrolv1.PriorityLevelConfiguration).Spec.Limited
	}
	queuing := func(obj runtime.Object, f func(*flowcontrolv1.QueuingConfiguration) int32) any {
		if l := limited(obj); l != nil && l.LimitResponse.Queuing != nil {
			return strconv.Itoa(int(f(l.LimitResponse.Queuing)))
		}
		return "<none>"
	}
	return []Column{{
		Definition: metav1.TableColumnDefinition{Name: "Type", Type: "string", Description: "Exempt or Limited"},
		Cell: func(obj runtime.Object, _ time.Time) any {
			return string(obj.(*flowcontrolv1.PriorityLevelConfiguration).Spec.Type)
		},
	}, {
		Definition: metav1.TableColumnDefinition{Name: "NominalConcurrencyShares", Type: "string", Description: "Share of the server's concurrency limit"},
		Cell: func(obj runtime.Object, _ time.Time) any {
			if l := limited(obj); l != nil && l.NominalConcurrencyShares != nil {
				return strconv.Itoa(int(*l.NominalConcurrencyShares))
			}
			return "<none>"
		},
	}, {
		Definition: metav1.TableColumnDefinition{Name: "Queues", Type: "string", Description: "Number of queues"},
		Cell: func(obj runtime.Object, _ time.Time) any {
			return queuing(obj, func(q *flowcontrolv1.QueuingConfiguration) int32 { return q.Queues })
		},
	}, {
		Definition: metav1.TableColumnDefinition{Name: "HandSize", Type: "string", Description: "Queues dealt to each flow"},
		Cell: func(obj runtime.Object, _ time.Time) any {
			return queuing(obj, func(q *flowcontrolv1.QueuingConfiguration) int32 { return q.HandSize })
		},
	}, {
		Definition: metav1.TableColumnDefinition{Name: "QueueLengthLimit", Type: "string", Description: "Requests each queue holds"},
		Cell: func(obj runtime.Object, _ time.Time) any {
			return queuing(obj, func(q *flowcontrolv1.QueuingConfiguration) int32 { return q.QueueLengthLimit })
		},
	}, AgeColumn}
}

// Defaults of flowcontrol/v1, as kube-apiserver sets them.
const (
	defaultMatchingPrecedence = 1000
	defaultShares             = 30
	defaultQueues             = 64
	defaultHandSize           = 8
	defaultQueueLengthLimit   = 50
)

// DefaultFlowSchema sets the defaults of flowcontrol/v1 on fs.
func DefaultFlowSchema(fs *flowcontrolv1.FlowSchema) {
	if fs.Spec.MatchingPrecedence == 0 {
		fs.Spec.MatchingPrecedence = defaultMatchingPrecedence
	}
}

// DefaultPriorityLevel sets the defaults of flowcontrol/v1 on pl.
func DefaultPriorityLevel(pl *flowcontrolv1.PriorityLevelConfiguration) {
	zero := func(p **int32, v int32) {
		if *p == nil {
			*p = &v
		}
	}
	s := &pl.Spec
	if s.Type == flowcontrolv1.PriorityLevelEnablementExempt && s.Exempt == nil {
		s.Exempt = &flowcontrolv1.ExemptPriorityLevelConfiguration{}
	}
	if e := s.Exempt; e != nil {
		zero(&e.NominalConcurrencyShares, 0)
		zero(&e.LendablePercent, 0)
	}
	if l := s.Limited; l != nil {
		zero(&l.NominalConcurrencyShares, defaultShares)
		zero(&l.LendablePercent, 0)
		if q := l.LimitResponse.Queuing; q != nil {
			if q.Queues == 0 {
				q.Queues = defaultQueues
			}
			if q.HandSize == 0 {
				q.HandSize = defaultHandSize
			}
			if q.QueueLengthLimit == 0 {
				q.QueueLengthLimit = defaultQueueLengthLimit
			}
		}
	}
}

// bumpGeneration sets a new object's generation to 1, or adds one to the
// old one's when the spec changed, as kube-apiserver's strategies do
// (the autoupdate-spec rules read it).
func bumpGeneration(m, old *metav1.ObjectMeta, specChanged bool) {
	if old == nil {
		m.Generation = 1
		return
	}
	m.Generation = old.Generation
	if specChanged {
		m.Generation++
	}
}

type flowSchemaStrategy struct{}

// PrepareForCreate defaults fs, clears its status (written through the
// status subresource only) and sets its generation.
func (flowSchemaStrategy) PrepareForCreate(obj runtime.Object) {
	fs := obj.(*flowcontrolv1.FlowSchema)
	DefaultFlowSchema(fs)
	fs.Status = flowcontrolv1.FlowSchemaStatus{}
	bumpGeneration(&fs.ObjectMeta, nil, false)
}

// PrepareForUpdate defaults fs and keeps the stored status.
func (flowSchemaStrategy) PrepareForUpdate(obj, old runtime.Object) {
	fs, oldFS := obj.(*flowcontrolv1.FlowSchema), old.(*flowcontrolv1.FlowSchema)
	DefaultFlowSchema(fs)
	fs.Status = oldFS.Status
	bumpGeneration(&fs.ObjectMeta, &oldFS.ObjectMeta, !equality.Semantic.DeepEqual(fs.Spec, oldFS.Spec))
}

// PrepareForSubresourceUpdate: a status write changes only the status.
func (flowSchemaStrategy) PrepareForSubresourceUpdate(sub string, obj, old runtime.Object) bool {
	if sub != "status" {
		return false
	}
	fs, oldFS := obj.(*flowcontrolv1.FlowSchema), old.(*flowcontrolv1.FlowSchema)
	fs.Spec = oldFS.Spec
	metav1.ResetObjectMetaForStatus(&fs.ObjectMeta, &oldFS.ObjectMeta)
	return true
}

func (flowSchemaStrategy) Validate(obj runtime.Object) field.ErrorList {
	return validateFlowSchema(obj.(*flowcontrolv1.FlowSchema))
}

func (s flowSchemaStrategy) ValidateUpdate(obj, old runtime.Object) field.ErrorList {
	fs, oldFS := obj.(*flowcontrolv1.FlowSchema), old.(*flowcontrolv1.FlowSchema)
	errs := apivalidation.ValidateObjectMetaUpdate(&fs.ObjectMeta, &oldFS.ObjectMeta, field.NewPath("metadata"))
	return append(errs, validateFlowSchema(fs)...)
}

type priorityLevelStrategy struct{}

// PrepareForCreate defaults pl, clears its status and sets its generation.
func (priorityLevelStrategy) PrepareForCreate(obj runtime.Object) {
	pl := obj.(*flowcontrolv1.PriorityLevelConfiguration)
	DefaultPriorityLevel(pl)
	pl.Status = flowcontrolv1.PriorityLevelConfigurationStatus{}
	bumpGeneration(&pl.ObjectMeta, nil, false)
}

// PrepareForUpdate defaults pl and keeps the stored status.
func (priorityLevelStrategy) PrepareForUpdate(obj, old runtime.Object) {
	pl, oldPL := obj.(*flowcontrolv1.PriorityLevelConfiguration), old.(*flowcontrolv1.PriorityLevelConfiguration)
	DefaultPriorityLevel(pl)
	pl.Status = oldPL.Status
	bumpGeneration(&pl.ObjectMeta, &oldPL.ObjectMeta, !equality.Semantic.DeepEqual(pl.Spec, oldPL.Spec))
}

// PrepareForSubresourceUpdate: a status write changes only the status.
func (priorityLevelStrategy) PrepareForSubresourceUpdate(sub string, obj, old runtime.Object) bool {
	if sub != "status" {
		return false
	}
	pl, oldPL := obj.(*flowcontrolv1.PriorityLevelConfiguration), old.(*flowcontrolv1.PriorityLevelConfiguration)
	pl.Spec = oldPL.Spec
	metav1.ResetObjectMetaForStatus(&pl.ObjectMeta, &oldPL.ObjectMeta)
	return true
}

func (priorityLevelStrategy) Validate(obj runtime.Object) field.ErrorList {
	return validatePriorityLevel(obj.(*flowcontrolv1.PriorityLevelConfiguration))
}

func (priorityLevelStrategy) ValidateUpdate(obj, old runtime.Object) field.ErrorList {
	pl, oldPL := obj.(*flowcontrolv1.PriorityLevelConfiguration), old.(*flowcontrolv1.PriorityLevelConfiguration)
	errs := apivalidation.ValidateObjectMetaUpdate(&pl.ObjectMeta, &oldPL.ObjectMeta, field.NewPath("metadata"))
	return append(errs, validatePriorityLevel(pl)...)
}

// mandatoryFlowSchema returns the mandatory flow schema named name.
func mandatoryFlowSchema(name string) *flowcontrolv1.FlowSchema {
	for _, fs := range apfbootstrap.MandatoryFlowSchemas() {
		if fs.Name == name {
			return fs
		}
	}
	return nil
}

// mandatoryPriorityLevel returns the mandatory priority level named name.
func mandatoryPriorityLevel(name string) *flowcontrolv1.PriorityLevelConfiguration {
	for _, pl := range apfbootstrap.MandatoryPriorityLevels() {
		if pl.Name == name {
			return pl
		}
	}
	return nil
}
