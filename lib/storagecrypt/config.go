package storagecrypt

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsyaml "sigs.k8s.io/yaml"
)

// The configuration file is kube-apiserver's --encryption-provider-config:
// apiserver.config.k8s.io/v1 EncryptionConfiguration, field for field.
// The types are declared here rather than imported from
// k8s.io/apiserver/pkg/apis/apiserver/v1, whose package pulls in
// k8s.io/component-base's feature gates and their global metrics registry
// for the sake of a few structs.

// APIVersion and Kind name the configuration file's type.
const (
	APIVersion = "apiserver.config.k8s.io/v1"
	Kind       = "EncryptionConfiguration"
)

// EncryptionConfiguration lists, for groups of resources, the providers
// that encrypt them: the first provider of a list encrypts every write,
// and each provider of the list reads what it wrote.
type EncryptionConfiguration struct {
	metav1.TypeMeta `json:",inline"`
	// Resources are the resource lists and their providers, in order:
	// earlier lists take precedence.
	Resources []ResourceConfiguration `json:"resources"`
}

// ResourceConfiguration is one resource list and its providers.
type ResourceConfiguration struct {
	// Resources are "resource" (core group) or "resource.group" names, or
	// "*.group" (every resource of a group; "*." is the core group) and
	// "*.*" (every resource).
	Resources []string `json:"resources"`
	// Providers encrypt and decrypt the resources; the first encrypts.
	Providers []ProviderConfiguration `json:"providers"`
}

// ProviderConfiguration is one provider: exactly one field is set.
type ProviderConfiguration struct {
	AESGCM    *AESConfiguration       `json:"aesgcm,omitempty"`
	AESCBC    *AESConfiguration       `json:"aescbc,omitempty"`
	Secretbox *SecretboxConfiguration `json:"secretbox,omitempty"`
	Identity  *IdentityConfiguration  `json:"identity,omitempty"`
	KMS       *KMSConfiguration       `json:"kms,omitempty"`
}

// AESConfiguration holds the keys of aesgcm or aescbc: 16, 24 or 32 bytes
// each. The first key encrypts; every key decrypts.
type AESConfiguration struct {
	Keys []Key `json:"keys"`
}

// SecretboxConfiguration holds the keys of secretbox: 32 bytes each.
type SecretboxConfiguration struct {
	Keys []Key `json:"keys"`
}

// Key is a named key. Its name is written in clear before every value it
// encrypts.
type Key struct {
	Name string `json:"name"`
	// Secret is the key, base64-encoded.
	Secret string `json:"secret"`
}

// String keeps the secret out of logs.
func (k Key) String() string { return fmt.Sprintf("Name: %s, Secret: [REDACTED]", k.Name) }

// IdentityConfiguration is identity's (empty) configuration: values are
// stored as they are.
type IdentityConfiguration struct{}

// KMSConfiguration is a KMS v2 plugin, reached over a Unix socket.
type KMSConfiguration struct {
	// APIVersion is the plugin API: "v2" (v1 is not supported).
	APIVersion string `json:"apiVersion"`
	// Name names the provider in the prefix of the values it writes.
	Name string `json:"name"`
	// CacheSize is a KMS v1 setting, refused for v2.
	CacheSize *int32 `json:"cachesize,omitempty"`
	// Endpoint is the plugin's socket, unix:///path/to/kms.sock.
	Endpoint string `json:"endpoint"`
	// Timeout bounds each call to the plugin; default 3s.
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// DefaultKMSTimeout is the timeout of a KMS call when the configuration
// sets none.
const DefaultKMSTimeout = 3 * time.Second

// LoadConfig reads and checks an EncryptionConfiguration file.
func LoadConfig(path string) (*EncryptionConfiguration, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("storagecrypt: %w", err)
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return cfg, nil
}

// ParseConfig decodes an EncryptionConfiguration (YAML or JSON), applies
// the defaults and checks it (Validate). Unknown fields are errors: a
// misspelt provider must not leave a resource unencrypted.
func ParseConfig(data []byte) (*EncryptionConfiguration, error) {
	var cfg EncryptionConfiguration
	if err := sigsyaml.UnmarshalStrict(data, &cfg); err != nil {
		return nil, fmt.Errorf("storagecrypt: decode the encryption configuration: %w", err)
	}
	if cfg.APIVersion != APIVersion || cfg.Kind != Kind {
		return nil, fmt.Errorf("storagecrypt: the encryption configuration is a %q of %q, want a %q of %q", cfg.Kind, cfg.APIVersion, Kind, APIVersion)
	}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// setDefaults applies kube-apiserver's defaults: a KMS provider without an
// apiVersion is v1, without a timeout 3s.
func (c *EncryptionConfiguration) setDefaults() {
	for i := range c.Resources {
		for _, p := range c.Resources[i].Providers {
			if p.KMS == nil {
				continue
			}
			if p.KMS.APIVersion == "" {
				p.KMS.APIVersion = "v1"
			}
			if p.KMS.Timeout == nil {
				p.KMS.Timeout = &metav1.Duration{Duration: DefaultKMSTimeout}
			}
		}
	}
}

// Key sizes each provider accepts, in bytes.
var (
	aesKeySizes       = []int{16, 24, 32}
	secretboxKeySizes = []int{32}
)

// Validate reports every problem of the configuration at once, with
// kube-apiserver's rules (and its messages, where it has one): resource
// names, overlaps, exactly one type per provider, keys' encoding and
// sizes, KMS names, endpoints and versions, and rules masked by an
// earlier wildcard.
func (c *EncryptionConfiguration) Validate() error {
	root := field.NewPath("resources")
	var errs field.ErrorList
	if len(c.Resources) == 0 {
		return fmt.Errorf("storagecrypt: invalid encryption configuration: %w", field.Required(root, "at least one resources entry is required"))
	}
	kmsNames := map[string]bool{}
	for i, rc := range c.Resources {
		rp, pp := root.Index(i).Child("resources"), root.Index(i).Child("providers")
		if len(rc.Resources) == 0 {
			errs = append(errs, field.Required(rp, "at least one resource is required"))
		}
		errs = append(errs, validateResourceNames(rc.Resources, rp)...)
		errs = append(errs, validateOverlap(rc.Resources, rp)...)
		if len(rc.Providers) == 0 {
			errs = append(errs, field.Required(pp, "at least one provider is required"))
		}
		for j, p := range rc.Providers {
			errs = append(errs, validateProvider(p, pp.Index(j), kmsNames)...)
		}
	}
	errs = append(errs, c.validateMasking(root)...)
	if len(errs) > 0 {
		return fmt.Errorf("storagecrypt: invalid encryption configuration: %w", errs.ToAggregate())
	}
	return nil
}

// validateResourceNames checks each resource name of one list.
func validateResourceNames(resources []string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, r := range resources {
		p := path.Index(i)
		gr := schema.ParseGroupResource(r)
		switch {
		case strings.ToLower(r) != r:
			errs = append(errs, field.Invalid(p, r, "resource name should not contain capital letters"))
		case r == "" || r == "*":
			errs = append(errs, field.Invalid(p, r, "use '*.' to encrypt all the resources from core API group or *.* to encrypt all resources"))
		case gr.Group == "events.k8s.io":
			errs = append(errs, field.Invalid(p, r, "'*.events.k8s.io' objects are stored using the 'events' API group in etcd. Use 'events' instead in the config file"))
		case gr.Group == "extensions":
			errs = append(errs, field.Invalid(p, r, "'extensions' group has been removed and cannot be used for encryption"))
		case gr.Group == "*" && gr.Resource != "*":
			errs = append(errs, field.Invalid(p, r, "encrypting the same resource across groups is not supported"))
		}
	}
	return errs
}

// validateOverlap refuses a list that names a resource twice, or a
// resource and a wildcard that covers it.
func validateOverlap(resources []string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	var dup, overlap bool
	grs := make([]schema.GroupResource, len(resources))
	for i, r := range resources {
		grs[i] = schema.ParseGroupResource(r)
	}
	for i, a := range grs {
		for j, b := range grs {
			switch {
			case i == j:
			case a == b:
				dup = true
			case a == anyResource || (a.Group == b.Group && (a.Resource == "*" || b.Resource == "*")):
				overlap = true
			}
		}
	}
	if dup {
		errs = append(errs, field.Invalid(path, resources, "the same resource cannot be specified multiple times"))
	}
	if overlap {
		errs = append(errs, field.Invalid(path, resources, "using overlapping resources such as 'secrets' and '*.' in the same resource list is not allowed as they will be masked"))
	}
	return errs
}

// anyResource is "*.*".
var anyResource = schema.GroupResource{Group: "*", Resource: "*"}

// validateMasking refuses a rule that an earlier "*.group" or "*.*" rule
// makes unreachable.
func (c *EncryptionConfiguration) validateMasking(root *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[schema.GroupResource]bool{}
	for i, rc := range c.Resources {
		for j, r := range rc.Resources {
			gr := schema.ParseGroupResource(r)
			for _, mask := range []schema.GroupResource{{Group: gr.Group, Resource: "*"}, anyResource} {
				if seen[mask] {
					errs = append(errs, field.Invalid(root.Index(i).Child("resources").Index(j), r,
						fmt.Sprintf("resource %q is masked by earlier rule %q", grString(gr), grString(mask))))
					break
				}
			}
		}
		for _, r := range rc.Resources {
			seen[schema.ParseGroupResource(r)] = true
		}
	}
	return errs
}

// grString writes gr as the configuration does ("*." for the core group's
// wildcard).
func grString(gr schema.GroupResource) string {
	if gr.Group == "" {
		if gr.Resource == "*" {
			return "*."
		}
		return gr.Resource
	}
	return gr.Resource + "." + gr.Group
}

// validateProvider checks one provider; kmsNames collects KMS provider
// names, which must be unique.
func validateProvider(p ProviderConfiguration, path *field.Path, kmsNames map[string]bool) field.ErrorList {
	n := 0
	for _, set := range []bool{p.AESGCM != nil, p.AESCBC != nil, p.Secretbox != nil, p.Identity != nil, p.KMS != nil} {
		if set {
			n++
		}
	}
	switch {
	case n == 0:
		return field.ErrorList{field.Invalid(path, "", "provider does not contain any of the expected providers: KMS, AESGCM, AESCBC, Secretbox, Identity")}
	case n > 1:
		return field.ErrorList{field.Invalid(path, "", "more than one provider specified in a single element, should split into different list elements")}
	}
	switch {
	case p.AESGCM != nil:
		return validateKeys(p.AESGCM.Keys, path.Child("aesgcm", "keys"), aesKeySizes)
	case p.AESCBC != nil:
		return validateKeys(p.AESCBC.Keys, path.Child("aescbc", "keys"), aesKeySizes)
	case p.Secretbox != nil:
		return validateKeys(p.Secretbox.Keys, path.Child("secretbox", "keys"), secretboxKeySizes)
	case p.KMS != nil:
		return validateKMS(p.KMS, path.Child("kms"), kmsNames)
	}
	return nil
}

// validateKeys checks a provider's keys: at least one, each named, with a
// base64 secret of one of sizes.
func validateKeys(keys []Key, path *field.Path, sizes []int) field.ErrorList {
	if len(keys) == 0 {
		return field.ErrorList{field.Required(path, "at least one keys is required")}
	}
	var errs field.ErrorList
	for i, k := range keys {
		p := path.Index(i)
		if k.Name == "" {
			errs = append(errs, field.Required(p.Child("name"), "name is a mandatory field for a key"))
		}
		if k.Secret == "" {
			errs = append(errs, field.Required(p.Child("secret"), "secret is a mandatory field for a key"))
			continue
		}
		secret, err := base64.StdEncoding.DecodeString(k.Secret)
		if err != nil {
			errs = append(errs, field.Invalid(p.Child("secret"), "REDACTED", "secrets must be base64 encoded"))
			continue
		}
		if !slices.Contains(sizes, len(secret)) {
			errs = append(errs, field.Invalid(p.Child("secret"), "REDACTED", fmt.Sprintf("secret is not of the expected length, got %d, expected one of %v", len(secret), sizes)))
		}
	}
	return errs
}

// validateKMS checks a KMS provider.
func validateKMS(k *KMSConfiguration, path *field.Path, names map[string]bool) field.ErrorList {
	var errs field.ErrorList
	switch {
	case k.Name == "":
		errs = append(errs, field.Required(path.Child("name"), "name is a mandatory field for a provider"))
	case strings.Contains(k.Name, ":"):
		errs = append(errs, field.Invalid(path.Child("name"), k.Name, fmt.Sprintf("invalid KMS provider name %s, must not contain ':'", k.Name)))
	case names[k.Name]:
		errs = append(errs, field.Invalid(path.Child("name"), k.Name, fmt.Sprintf("duplicate KMS provider name %s, names must be unique", k.Name)))
	}
	names[k.Name] = true
	switch k.APIVersion {
	case "v2":
	case "v1":
		errs = append(errs, field.Invalid(path.Child("apiVersion"), k.APIVersion, "KMS v1 is deprecated and not supported: use apiVersion: v2 (a KMS v2 plugin)"))
	default:
		errs = append(errs, field.Invalid(path.Child("apiVersion"), k.APIVersion, "unsupported apiVersion for KMS provider, only v2 is supported"))
	}
	if k.CacheSize != nil {
		errs = append(errs, field.Invalid(path.Child("cachesize"), *k.CacheSize, "cachesize is not supported in v2"))
	}
	if k.Timeout != nil && k.Timeout.Duration <= 0 {
		errs = append(errs, field.Invalid(path.Child("timeout"), k.Timeout.Duration.String(), "timeout should be a positive value"))
	}
	if _, err := socketPath(k.Endpoint); err != nil {
		errs = append(errs, field.Invalid(path.Child("endpoint"), k.Endpoint, err.Error()))
	}
	return errs
}

// socketPath returns the path of a unix:// endpoint.
func socketPath(endpoint string) (string, error) {
	if endpoint == "" {
		return "", errors.New("endpoint is a mandatory field for a kms")
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", fmt.Errorf("invalid endpoint for kms provider, error: %w", err)
	}
	if u.Scheme != "unix" {
		return "", fmt.Errorf("unsupported scheme %q for KMS provider, only unix is supported", u.Scheme)
	}
	p := u.Path
	if p == "" {
		p = u.Opaque
	}
	if p == "" {
		return "", errors.New("the unix endpoint names no socket")
	}
	return p, nil
}
