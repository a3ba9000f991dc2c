package frontend

import (
	"net/url"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// checkParams decodes the query of a request into the options kube-apiserver
// decodes it into for the verb (ListOptions for list, watch and
// deletecollection, DeleteOptions for delete and deletecollection), with
// the parameter codec it uses, so that a parameter of the wrong type —
// timeoutSeconds=abc, limit=1.5, gracePeriodSeconds=x — is kube-apiserver's
// 400 BadRequest for every verb, whether or not the ResourceService reads
// that parameter for it (a list does not read timeoutSeconds). Parameters
// the options do not have are left alone, as there.
func checkParams(verb string, q url.Values) error {
	var into []runtime.Object
	switch verb {
	case "list", "watch":
		into = []runtime.Object{&metav1.ListOptions{}}
	case "delete":
		into = []runtime.Object{&metav1.DeleteOptions{}}
	case "deletecollection":
		into = []runtime.Object{&metav1.ListOptions{}, &metav1.DeleteOptions{}}
	}
	for _, opts := range into {
		if err := metainternalversionscheme.ParameterCodec.DecodeParameters(q, metav1.SchemeGroupVersion, opts); err != nil {
			return apierrors.NewBadRequest(err.Error())
		}
	}
	return nil
}
