package serviceaccount

import (
	"strings"

	"github.com/go-jose/go-jose/v4/jwt"
)

// privateClaims are the claims of a service account token beyond the
// registered ones, as kube-apiserver writes them:
//
//	"kubernetes.io": {"namespace": "demo",
//	  "serviceaccount": {"name": "app", "uid": "..."},
//	  "pod": {"name": "...", "uid": "..."}, "node": {...}, "secret": {...}}
type privateClaims struct {
	Kubernetes kubernetesClaims `json:"kubernetes.io,omitempty"`
}

type kubernetesClaims struct {
	Namespace      string           `json:"namespace,omitempty"`
	ServiceAccount ref              `json:"serviceaccount,omitempty"`
	Pod            *ref             `json:"pod,omitempty"`
	Secret         *ref             `json:"secret,omitempty"`
	Node           *ref             `json:"node,omitempty"`
	WarnAfter      *jwt.NumericDate `json:"warnafter,omitempty"`
}

// ref names an object a token is bound to.
type ref struct {
	Name string `json:"name,omitempty"`
	UID  string `json:"uid,omitempty"`
}

// Groups and extra keys of service account users, as kube-apiserver names
// them.
const (
	// AllServiceAccountsGroup holds every service account.
	AllServiceAccountsGroup = "system:serviceaccounts"
	// userPrefix starts every service account's user name.
	userPrefix = "system:serviceaccount:"

	extraCredentialID = "authentication.kubernetes.io/credential-id"
	extraPodName      = "authentication.kubernetes.io/pod-name"
	extraPodUID       = "authentication.kubernetes.io/pod-uid"
	extraNodeName     = "authentication.kubernetes.io/node-name"
	extraNodeUID      = "authentication.kubernetes.io/node-uid"
)

// UserName is the user name of a service account:
// system:serviceaccount:<namespace>:<name>.
func UserName(namespace, name string) string { return userPrefix + namespace + ":" + name }

// splitUserName reads a service account user name; ok is false for any
// other name.
func splitUserName(user string) (namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(user, userPrefix)
	if !ok {
		return "", "", false
	}
	namespace, name, ok = strings.Cut(rest, ":")
	return namespace, name, ok && namespace != "" && name != "" && !strings.Contains(name, ":")
}

// NamespaceGroup is the group of the service accounts of namespace.
func NamespaceGroup(namespace string) string { return AllServiceAccountsGroup + ":" + namespace }
