package v1alpha1

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// Bounds of a VM's size, defined once: the CRD markers carry the same
// values (a test compares them with the generated CRDs) and the shim
// refuses pod annotations outside them.
const (
	MinVCPU             = 1
	MaxVCPU             = 64
	MinMemoryMiB        = 64
	MaxMemoryMiB        = 262144
	MinWritableLayerMiB = 16
	MaxWritableLayerMiB = 1048576
	// MaxSlotsPerNode bounds Template.spec.slots and --slots-per-node.
	MaxSlotsPerNode = 64
)

// Restore kinds: what a pod's VM may restore from.
const (
	RestoreKindSnapshot      = "Snapshot"
	RestoreKindPausedSandbox = "PausedSandbox"
)

// RestoreRef names the data a pod's VM restores from.
type RestoreRef struct {
	Kind     string `json:"kind"` // RestoreKindSnapshot or RestoreKindPausedSandbox
	Name     string `json:"name"`
	UID      string `json:"uid"`
	Location string `json:"location"` // the data's location in the store
	// Boot cold-boots the VM on the data's disk, its memory unread
	// (Sandbox spec.resumeBy Boot).
	Boot bool `json:"boot,omitempty"`
}

// VMAnnotations is everything the controller tells the shim (and the node
// agent) through a sandlot pod's annotations. Encode and
// DecodeVMAnnotations are the only code that reads or writes them.
type VMAnnotations struct {
	SandboxID string
	// Restore is nil for a cold boot of the image.
	Restore *RestoreRef
	// VCPU, MemoryMiB and WritableLayerMiB size the VM; 0 leaves the
	// size to the node's shim config.
	VCPU             int32
	MemoryMiB        int32
	WritableLayerMiB int32
	// Pool is the Template of a warm pool pod ("" for any other pod).
	Pool string
	// Slot: the pool pod is a start slot — no VM until a claim restores
	// into it (AnnotationBoot BootSlot).
	Slot bool
	// Claim is the sandbox that claimed a warm pool pod, nil until then.
	Claim *PoolClaim
	// ClaimActivated is the claim the node agent carried out (raw).
	ClaimActivated string
	// Network is the sandbox's spec.network (nil: the node's defaults).
	Network *SandboxNetwork
	// Volumes are the Volumes the shim serves to the VM.
	Volumes []PodVolume
}

// Encode renders the annotations.
func (a VMAnnotations) Encode() (map[string]string, error) {
	m := map[string]string{AnnotationBoot: BootCold}
	set := func(k, v string) {
		if v != "" {
			m[k] = v
		}
	}
	setInt := func(k string, v int32) {
		if v != 0 {
			m[k] = strconv.Itoa(int(v))
		}
	}
	set(AnnotationSandboxID, a.SandboxID)
	setInt(AnnotationVCPU, a.VCPU)
	setInt(AnnotationMemoryMiB, a.MemoryMiB)
	setInt(AnnotationWritableLayerMiB, a.WritableLayerMiB)
	set(AnnotationPool, a.Pool)
	set(AnnotationClaimActivated, a.ClaimActivated)
	if a.Slot {
		m[AnnotationBoot] = BootSlot
	}
	if r := a.Restore; r != nil {
		m[AnnotationBoot] = BootRestore
		if r.Boot {
			m[AnnotationBoot] = BootDisk
		}
		m[AnnotationRestoreKind], m[AnnotationRestoreName] = r.Kind, r.Name
		m[AnnotationRestoreUID], m[AnnotationRestoreLocation] = r.UID, r.Location
	}
	netv, err := EncodeNetwork(a.Network)
	if err != nil {
		return nil, err
	}
	set(AnnotationNetwork, netv)
	if err := encodePodVolumes(m, a.Volumes); err != nil {
		return nil, err
	}
	if a.Claim != nil {
		b, err := json.Marshal(a.Claim)
		if err != nil {
			return nil, fmt.Errorf("encode claim: %w", err)
		}
		m[AnnotationClaim] = string(b)
	}
	return m, a.validate()
}

// DecodeVMAnnotations parses and validates a pod's annotations; an error
// names the annotation at fault.
func DecodeVMAnnotations(m map[string]string) (VMAnnotations, error) {
	a := VMAnnotations{SandboxID: m[AnnotationSandboxID], Pool: m[AnnotationPool], ClaimActivated: m[AnnotationClaimActivated]}
	var errs []error
	intOf := func(key string) int32 {
		v, ok := m[key]
		if !ok {
			return 0
		}
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n == 0 {
			errs = append(errs, fmt.Errorf("annotation %s=%q: want a positive integer", key, v))
		}
		return int32(n)
	}
	a.VCPU, a.MemoryMiB, a.WritableLayerMiB = intOf(AnnotationVCPU), intOf(AnnotationMemoryMiB), intOf(AnnotationWritableLayerMiB)
	switch boot := m[AnnotationBoot]; boot {
	case "", BootCold:
		errs = append(errs, refuseRestoreKeys(m, boot))
	case BootSlot:
		a.Slot = true
		errs = append(errs, refuseRestoreKeys(m, boot))
	case BootRestore, BootDisk:
		a.Restore = &RestoreRef{Kind: m[AnnotationRestoreKind], Name: m[AnnotationRestoreName],
			UID: m[AnnotationRestoreUID], Location: m[AnnotationRestoreLocation], Boot: boot == BootDisk}
	default:
		errs = append(errs, fmt.Errorf("annotation %s=%q: want %q, %q, %q or %q", AnnotationBoot, boot, BootCold, BootRestore, BootDisk, BootSlot))
	}
	var err error
	if a.Network, _, err = DecodeNetwork(m[AnnotationNetwork]); err != nil {
		errs = append(errs, err)
	}
	if a.Volumes, err = decodePodVolumes(m); err != nil {
		errs = append(errs, err)
	}
	if raw, ok := m[AnnotationClaim]; ok {
		a.Claim = &PoolClaim{}
		if err := json.Unmarshal([]byte(raw), a.Claim); err != nil {
			errs = append(errs, fmt.Errorf("annotation %s: %w", AnnotationClaim, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return a, err
	}
	return a, a.validate()
}

// refuseRestoreKeys: a cold boot carries no restore source (a half-written
// one must not be taken for a cold boot silently).
func refuseRestoreKeys(m map[string]string, boot string) error {
	for _, k := range []string{AnnotationRestoreKind, AnnotationRestoreName, AnnotationRestoreUID, AnnotationRestoreLocation} {
		if _, ok := m[k]; ok {
			return fmt.Errorf("annotation %s is set but %s is %q, not %q", k, AnnotationBoot, boot, BootRestore)
		}
	}
	return nil
}

// Source is the data the pod's VM runs from: a claim's restore, else the
// pod's own (nil: a cold boot). A claimed warm pool pod's annotations
// keep the template's base it restored before the claim.
func (a VMAnnotations) Source() *RestoreRef {
	if a.Claim != nil && a.Claim.Restore != nil {
		return a.Claim.Restore
	}
	return a.Restore
}

// PodSource is Source of a pod's annotations, nil when they do not
// decode.
func PodSource(annotations map[string]string) *RestoreRef {
	a, err := DecodeVMAnnotations(annotations)
	if err != nil {
		return nil
	}
	return a.Source()
}

// PodRestoresFrom: the VM of a pod with these annotations runs from the
// data of that UID (by the pod's start, or by a warm pool claim).
func PodRestoresFrom(annotations map[string]string, uid string) bool {
	src := PodSource(annotations)
	return src != nil && src.UID == uid
}

// IsStartSlot: a pod with these annotations is a template's start slot.
func IsStartSlot(annotations map[string]string) bool {
	return annotations[AnnotationBoot] == BootSlot
}

// ClaimPending: a warm pool pod claimed by a sandbox its VM does not run
// as yet (the node agent has not carried the claim out).
func ClaimPending(annotations map[string]string) bool {
	claim := annotations[AnnotationClaim]
	return claim != "" && annotations[AnnotationClaimActivated] != claim
}

func (r *RestoreRef) validate(what string) error {
	if r.Kind != RestoreKindSnapshot && r.Kind != RestoreKindPausedSandbox {
		return fmt.Errorf("%s kind %q: want %s or %s", what, r.Kind, RestoreKindSnapshot, RestoreKindPausedSandbox)
	}
	if r.Name == "" || r.UID == "" || r.Location == "" {
		return fmt.Errorf("%s needs a name, a UID and a location", what)
	}
	return nil
}

func (a VMAnnotations) validate() error {
	var errs []error
	bound := func(key string, v, lo, hi int32) {
		if v != 0 && (v < lo || v > hi) {
			errs = append(errs, fmt.Errorf("annotation %s=%d: want an integer in [%d, %d]", key, v, lo, hi))
		}
	}
	bound(AnnotationVCPU, a.VCPU, MinVCPU, MaxVCPU)
	bound(AnnotationMemoryMiB, a.MemoryMiB, MinMemoryMiB, MaxMemoryMiB)
	bound(AnnotationWritableLayerMiB, a.WritableLayerMiB, MinWritableLayerMiB, MaxWritableLayerMiB)
	if err := validatePodVolumes(a.Volumes); err != nil {
		errs = append(errs, err)
	}
	if r := a.Restore; r != nil {
		if r.Kind != RestoreKindSnapshot && r.Kind != RestoreKindPausedSandbox {
			errs = append(errs, fmt.Errorf("annotation %s=%q: want %s or %s", AnnotationRestoreKind, r.Kind,
				RestoreKindSnapshot, RestoreKindPausedSandbox))
		}
		if r.UID == "" || r.Location == "" {
			errs = append(errs, fmt.Errorf("a restore needs annotations %s and %s", AnnotationRestoreUID, AnnotationRestoreLocation))
		}
	}
	if a.Slot && (a.Pool == "" || a.Restore != nil) {
		errs = append(errs, fmt.Errorf("annotation %s=%q: a start slot is a pool pod (%s set) that restores nothing before its claim",
			AnnotationBoot, BootSlot, AnnotationPool))
	}
	if c := a.Claim; c != nil {
		if a.Pool == "" {
			errs = append(errs, fmt.Errorf("annotation %s on a pod that is not a pool pod (%s unset)", AnnotationClaim, AnnotationPool))
		}
		if c.Sandbox == "" || !ValidSandboxID(c.SandboxID) {
			errs = append(errs, fmt.Errorf("annotation %s: want a sandbox name and a 20-character sandbox ID", AnnotationClaim))
		}
		if c.Restore != nil {
			errs = append(errs, c.Restore.validate("annotation "+AnnotationClaim+": restore"))
		}
	}
	if a.SandboxID != "" && !ValidSandboxID(a.SandboxID) {
		errs = append(errs, fmt.Errorf("annotation %s=%q: want 20 characters [a-z0-9]", AnnotationSandboxID, a.SandboxID))
	}
	return errors.Join(errs...)
}
