package telemetry

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c on reg and returns it or, when a collector with the
// same description is already registered there, that existing collector,
// so that several components (or several instances of one) may share a
// Registerer without panicking. It fails when the existing collector is of
// another type or the descriptions conflict.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	var zero C
	return zero, fmt.Errorf("telemetry: register metrics: %w", err)
}
