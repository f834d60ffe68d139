package metrics

// The controller serves its metrics as controller-runtime's secure
// default (cmd/sandlot-controller): each scrape's bearer token is checked
// with a TokenReview, and its user's right to get /metrics with a
// SubjectAccessReview. These rules let it ask.

// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
