package deploy

// The chart's objects of kinds k8s.io/api does not have are decoded
// strictly into these mirrors of their CRDs' schemas (the fields of
// cert-manager.io/v1 and monitoring.coreos.com/v1 the chart may set,
// named and typed as the CRDs define them): a misspelt or misplaced field
// fails the test as it would fail the API server's validation.

type objectMeta struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type issuerRef struct {
	Name  string `json:"name"`
	Kind  string `json:"kind,omitempty"`
	Group string `json:"group,omitempty"`
}

// certificate mirrors cert-manager.io/v1 Certificate.
type certificate struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       struct {
		SecretName  string `json:"secretName"`
		CommonName  string `json:"commonName,omitempty"`
		IsCA        bool   `json:"isCA,omitempty"`
		Duration    string `json:"duration,omitempty"`
		RenewBefore string `json:"renewBefore,omitempty"`
		Subject     *struct {
			Organizations []string `json:"organizations,omitempty"`
		} `json:"subject,omitempty"`
		PrivateKey *struct {
			Algorithm      string `json:"algorithm,omitempty"`
			Size           int    `json:"size,omitempty"`
			RotationPolicy string `json:"rotationPolicy,omitempty"`
		} `json:"privateKey,omitempty"`
		Usages      []string  `json:"usages,omitempty"`
		DNSNames    []string  `json:"dnsNames,omitempty"`
		IPAddresses []string  `json:"ipAddresses,omitempty"`
		IssuerRef   issuerRef `json:"issuerRef"`
	} `json:"spec"`
}

// issuer mirrors cert-manager.io/v1 Issuer.
type issuer struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       struct {
		SelfSigned *struct{} `json:"selfSigned,omitempty"`
		CA         *struct {
			SecretName string `json:"secretName"`
		} `json:"ca,omitempty"`
	} `json:"spec"`
}

// serviceMonitor mirrors monitoring.coreos.com/v1 ServiceMonitor.
type serviceMonitor struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path,omitempty"`
			Interval string `json:"interval,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// prometheusRule mirrors monitoring.coreos.com/v1 PrometheusRule.
type prometheusRule struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       struct {
		Groups []ruleGroup `json:"groups"`
	} `json:"spec"`
}

// ruleGroup is a group of Prometheus alerting rules.
type ruleGroup struct {
	Name  string `json:"name"`
	Rules []struct {
		Alert       string            `json:"alert"`
		Expr        string            `json:"expr"`
		For         string            `json:"for,omitempty"`
		Labels      map[string]string `json:"labels,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	} `json:"rules"`
}

// crdKinds are the kinds decoded into the mirrors, by apiVersion/kind.
var crdKinds = map[string]func() any{
	"cert-manager.io/v1/Certificate":          func() any { return &certificate{} },
	"cert-manager.io/v1/Issuer":               func() any { return &issuer{} },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return &serviceMonitor{} },
	"monitoring.coreos.com/v1/PrometheusRule": func() any { return &prometheusRule{} },
}
