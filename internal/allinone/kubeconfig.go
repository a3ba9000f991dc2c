package allinone

import (
	"fmt"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// writeKubeconfig writes an admin kubeconfig for server, with the API CA
// (which signed the API's serving certificate) and the admin client
// certificate embedded, readable only by its owner.
func writeKubeconfig(path, server string, c *certs) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["meridian"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: c.apiCA.CertPEM()}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: c.admin.CertPEM, ClientKeyData: c.admin.KeyPEM}
	cfg.Contexts["meridian"] = &clientcmdapi.Context{Cluster: "meridian", AuthInfo: "admin", Namespace: "default"}
	cfg.CurrentContext = "meridian"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}
