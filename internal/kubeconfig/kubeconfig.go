// Package kubeconfig writes the kubeconfigs of meridian's API: one
// cluster (the API's address and the API CA that signed its serving
// certificate), one user (a client certificate the API CA signed) and one
// context joining them, everything embedded, so the file alone is the
// credential. The all-in-one's admin kubeconfig and `meridian pki
// kubeconfig` write the same shape.
package kubeconfig

import (
	"fmt"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/meridian-cp/meridian/lib/pki"
)

// Context is the name of the cluster and of the context a kubeconfig
// holds.
const Context = "meridian"

// Write writes a kubeconfig for server (https://host:port) to path, mode
// 0600: the cluster verified with caPEM, the user named user presenting
// kp, namespace default. An existing file is replaced.
func Write(path, server string, caPEM []byte, user string, kp pki.KeyPair) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[Context] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: kp.CertPEM, ClientKeyData: kp.KeyPEM}
	cfg.Contexts[Context] = &clientcmdapi.Context{Cluster: Context, AuthInfo: user, Namespace: "default"}
	cfg.CurrentContext = Context
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}
