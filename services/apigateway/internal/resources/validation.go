package resources

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fieldValidation is the fieldValidation parameter: what to do with unknown
// and duplicate fields in a body.
type fieldValidation string

const (
	validationIgnore fieldValidation = metav1.FieldValidationIgnore
	validationWarn   fieldValidation = metav1.FieldValidationWarn
	validationStrict fieldValidation = metav1.FieldValidationStrict
)

// parseFieldValidation checks the parameter; empty means Warn, as in
// kube-apiserver.
func parseFieldValidation(v string) (fieldValidation, error) {
	switch fieldValidation(v) {
	case "":
		return validationWarn, nil
	case validationIgnore, validationWarn, validationStrict:
		return fieldValidation(v), nil
	}
	return "", apierrors.NewBadRequest(fmt.Sprintf("fieldValidation: unsupported value %q: valid values are %q, %q and %q", v, validationIgnore, validationWarn, validationStrict))
}

// apply handles the unknown and duplicate fields found while decoding:
// Strict fails with a 400 naming every one, Warn sends each as a Warning
// header, Ignore drops them.
func (fv fieldValidation) apply(ctx context.Context, problems []string) error {
	if len(problems) == 0 {
		return nil
	}
	switch fv {
	case validationStrict:
		return apierrors.NewBadRequest("strict decoding error: " + strings.Join(problems, ", "))
	case validationWarn:
		warn(ctx, problems...)
	}
	return nil
}

// warn sends messages to the client as Warning headers (RFC 7234 code 299,
// as kube-apiserver formats them).
func warn(ctx context.Context, msgs ...string) {
	pairs := make([]string, 0, 2*len(msgs))
	for _, m := range msgs {
		pairs = append(pairs, "warning", "299 - "+strconv.Quote(m))
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs(pairs...))
}
