package v1alpha1

// EgressRule is E2B's per-domain transform: headers set on every HTTP
// and HTTPS request the sandbox makes to Domain.
type EgressRule struct {
	// Domain is a DNS name the rule matches exactly, or "*." and one: its
	// subdomains at any depth (an exact rule wins, then the longest
	// suffix). No IP or CIDR: the VM's resolver sends it to the proxy.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^([*][.])?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?[.])*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`
	Domain string `json:"domain"`

	// Headers replace any of the same name the sandbox sent.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=20
	// +listType=atomic
	Headers []HeaderTransform `json:"headers"`
}

// HeaderTransform is one header a rule sets. Value may hold
// ${e2b.secrets.KEY}: that key of spec.network.secretName, which the node
// substitutes as the request leaves.
type HeaderTransform struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Name string `json:"name"`
	// +kubebuilder:validation:MaxLength=2048
	Value string `json:"value"`
}

// EgressProxy is a SOCKS5 proxy the sandbox's TCP leaves through.
type EgressProxy struct {
	// Address is host:port; the host a DNS name or an IPv4 address.
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=261
	Address string `json:"address"`
	// Username authenticates (RFC 1929), with the password held in
	// spec.network.secretName's key EgressProxyPasswordKey.
	// +kubebuilder:validation:MaxLength=255
	// +optional
	Username string `json:"username,omitempty"`
}
