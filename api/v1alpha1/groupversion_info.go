// Package v1alpha1 holds the sandlot.dev/v1alpha1 API: Sandbox, Template,
// Snapshot and PausedSandbox, plus the labels, annotations, finalizers,
// condition types and reasons every sandlot component agrees on.
//
// It imports apimachinery only; every other package may import it.
//
// +kubebuilder:object:generate=true
// +groupName=sandlot.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of every sandlot kind.
var GroupVersion = schema.GroupVersion{Group: "sandlot.dev", Version: "v1alpha1"}

var (
	schemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the sandlot kinds to a scheme.
	AddToScheme = schemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&Sandbox{}, &SandboxList{},
		&Template{}, &TemplateList{},
		&Snapshot{}, &SnapshotList{},
		&PausedSandbox{}, &PausedSandboxList{},
		&Volume{}, &VolumeList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
