package policy

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/meridian-cp/meridian/lib/telemetry"
	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
)

// Named is an optional interface of a Policy: the name of the object that
// defines it (a ValidatingAdmissionPolicy's, a webhook's), which its
// trace span carries.
type Named interface {
	Name() string
}

// evaluate evaluates p, the i-th matching policy (its reinvocation pass
// when reinvoke is set: p is then a Reinvocable), under an
// "admission.policy" span saying which policy it was and what it
// decided, so that a trace shows the time each policy took.
func evaluate(ctx context.Context, p Policy, i int, req *admissionv1.AdmitRequest, reinvoke bool) (Decision, error) {
	run := p.Evaluate
	if reinvoke {
		run = p.(Reinvocable).Reinvoke
	}
	ctx, span := telemetry.StartSpan(ctx, telemetry.ScopeAdmission, "admission.policy")
	if !span.IsRecording() {
		return run(ctx, req)
	}
	defer span.End()
	span.SetAttributes(attribute.Int("admission.policy.index", i), attribute.Bool("admission.policy.reinvocation", reinvoke))
	if n, ok := p.(Named); ok {
		span.SetAttributes(attribute.String("admission.policy.name", n.Name()))
	}
	d, err := run(ctx, req)
	switch {
	case err != nil:
		span.SetStatus(codes.Error, err.Error())
	case d.Denial != nil:
		span.SetAttributes(attribute.Bool("admission.allowed", false), attribute.Int("admission.denial.code", int(d.Denial.Code)))
	default:
		span.SetAttributes(attribute.Bool("admission.allowed", true))
	}
	return d, err
}
