package apf

import (
	"errors"
	"fmt"
)

// Reasons a request is rejected, as in apiserver_flowcontrol_rejected_requests_total.
const (
	ReasonQueueFull        = "queue-full"
	ReasonConcurrencyLimit = "concurrency-limit"
	ReasonTimeout          = "time-out"
	ReasonCancelled        = "cancelled"
)

// Errors returned by the Controller; match with errors.Is.
var (
	// ErrRejected is matched by every *RejectedError.
	ErrRejected = errors.New("apf: request rejected")
	// ErrUnknownGrant reports a Release of a grant that is not held: never
	// granted, already released, or expired with its gateway.
	ErrUnknownGrant = errors.New("apf: unknown grant")
	// ErrInvalid reports a malformed request.
	ErrInvalid = errors.New("apf: invalid request")
	// ErrClosed reports a call on, or a wait cut short by, a closed
	// Controller.
	ErrClosed = errors.New("apf: controller closed")
)

// RejectedError is a request the priority level could not admit: its queue
// was full, it waited too long, or (for a level without queues) every seat
// was taken. The client should retry after a while.
type RejectedError struct {
	PriorityLevel string
	FlowSchema    string
	// FlowSchemaUID and PriorityLevelUID are the objects' UIDs, sent to
	// the client in the X-Kubernetes-PF-* headers of its 429.
	FlowSchemaUID, PriorityLevelUID string
	// Reason is one of the Reason constants.
	Reason string
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("apf: request of flow schema %q rejected by priority level %q: %s", e.FlowSchema, e.PriorityLevel, e.Reason)
}

// Unwrap makes errors.Is(err, ErrRejected) true.
func (e *RejectedError) Unwrap() error { return ErrRejected }
