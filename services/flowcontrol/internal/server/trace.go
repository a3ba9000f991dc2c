package server

import (
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/meridian-cp/meridian/lib/flowcontrol/apf"
)

// traceGrant records on the "flowcontrol.wait" span what an operator
// filters flow-control waits on: the flow schema and priority level that
// classified the request, its queue wait and seats, or why it was
// rejected.
func traceGrant(span trace.Span, g apf.Grant, err error) {
	var rej *apf.RejectedError
	if errors.As(err, &rej) {
		span.SetAttributes(
			attribute.String("k8s.flowcontrol.flow_schema", rej.FlowSchema),
			attribute.String("k8s.flowcontrol.priority_level", rej.PriorityLevel),
			attribute.String("k8s.flowcontrol.rejected", rej.Reason),
		)
		span.SetStatus(codes.Error, rej.Error())
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return
	}
	span.SetAttributes(
		attribute.String("k8s.flowcontrol.flow_schema", g.FlowSchema),
		attribute.String("k8s.flowcontrol.priority_level", g.PriorityLevel),
		attribute.Float64("k8s.flowcontrol.queue_wait_seconds", g.QueueWait.Seconds()),
		attribute.Int("k8s.flowcontrol.seats", g.Seats),
		attribute.Bool("k8s.flowcontrol.exempt", g.Exempt),
	)
}
