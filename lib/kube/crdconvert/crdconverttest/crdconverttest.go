// Package crdconverttest serves CRD conversion webhooks for tests: an
// http.Handler answering ConversionReview v1 requests with a function of
// the test's, as a user's webhook would.
package crdconverttest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// ConvertFunc converts obj (a decoded custom resource) to apiVersion in
// place; an error fails the whole review with its message.
type ConvertFunc func(obj map[string]any, apiVersion string) error

// Handler answers ConversionReview v1 requests by calling convert on each
// object.
func Handler(convert ConvertFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var rev apiextensionsv1.ConversionReview
		if err := json.NewDecoder(r.Body).Decode(&rev); err != nil || rev.Request == nil {
			http.Error(w, "bad ConversionReview", http.StatusBadRequest)
			return
		}
		resp := &apiextensionsv1.ConversionResponse{UID: rev.Request.UID, Result: metav1.Status{Status: metav1.StatusSuccess}}
		for _, raw := range rev.Request.Objects {
			obj := map[string]any{}
			if err := json.Unmarshal(raw.Raw, &obj); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			if err := convert(obj, rev.Request.DesiredAPIVersion); err != nil {
				resp = &apiextensionsv1.ConversionResponse{UID: rev.Request.UID, Result: metav1.Status{Status: metav1.StatusFailure, Message: err.Error()}}
				break
			}
			obj["apiVersion"] = rev.Request.DesiredAPIVersion
			data, err := json.Marshal(obj)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			resp.ConvertedObjects = append(resp.ConvertedObjects, runtime.RawExtension{Raw: data})
		}
		out := apiextensionsv1.ConversionReview{TypeMeta: rev.TypeMeta, Response: resp}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
}

// SizeReplicas is a ConvertFunc between two shapes of a kind: at v1
// spec.size is a string ("3"), at v2 spec.replicas an integer (3).
func SizeReplicas(obj map[string]any, apiVersion string) error {
	spec, _ := obj["spec"].(map[string]any)
	if spec == nil {
		return nil
	}
	switch {
	case strings.HasSuffix(apiVersion, "/v2"):
		if s, ok := spec["size"].(string); ok {
			n, err := strconv.Atoi(s)
			if err != nil {
				return fmt.Errorf("size %q is not a number", s)
			}
			delete(spec, "size")
			spec["replicas"] = n
		}
	case strings.HasSuffix(apiVersion, "/v1"):
		if n, ok := spec["replicas"].(float64); ok {
			delete(spec, "replicas")
			spec["size"] = strconv.Itoa(int(n))
		}
	}
	return nil
}
