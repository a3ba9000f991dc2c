package allinone

import "github.com/meridian-cp/meridian/internal/kubeconfig"

// writeKubeconfig writes an admin kubeconfig for server, with the API CA
// (which signed the API's serving certificate) and the admin client
// certificate embedded, readable only by its owner.
func writeKubeconfig(path, server string, c *certs) error {
	return kubeconfig.Write(path, server, c.apiCA.CertPEM(), "admin", c.admin)
}
