package v1alpha1

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/yaml"
)

const testID = "abcdefghij0123456789"

func TestVMAnnotationsRoundTrip(t *testing.T) {
	for _, a := range []VMAnnotations{
		{SandboxID: testID, VCPU: 2, MemoryMiB: 512, WritableLayerMiB: 1024},
		{SandboxID: testID, Restore: &RestoreRef{Kind: RestoreKindSnapshot, Name: "s", UID: "u1", Location: "snapshots/u1"}},
		{Restore: &RestoreRef{Kind: RestoreKindPausedSandbox, Name: "p", UID: "u2", Location: "paused/u2"}, Pool: "python"},
		{SandboxID: testID, Restore: &RestoreRef{Kind: RestoreKindPausedSandbox, Name: "p", UID: "u4", Location: "paused/u4", Boot: true}},
		{Pool: "python", Claim: &PoolClaim{Sandbox: "sbx", SandboxID: testID, Env: map[string]string{"A": "b"}}},
		{Pool: "python", Claim: &PoolClaim{Sandbox: "sbx", SandboxID: testID,
			Restore: &RestoreRef{Kind: RestoreKindPausedSandbox, Name: "sbx", UID: "u3", Location: "paused/u3"}}},
		{Pool: "python", Slot: true, VCPU: 1, MemoryMiB: 256},
		{Pool: "python", Slot: true, Claim: &PoolClaim{Sandbox: "sbx", SandboxID: testID,
			Restore: &RestoreRef{Kind: RestoreKindSnapshot, Name: "base", UID: "u4", Location: "snapshots/u4"}}},
	} {
		m, err := a.Encode()
		if err != nil {
			t.Fatalf("encode %+v: %v", a, err)
		}
		back, err := DecodeVMAnnotations(m)
		if err != nil {
			t.Fatalf("decode %v: %v", m, err)
		}
		if !reflect.DeepEqual(back, a) {
			t.Errorf("round trip: got %+v, want %+v", back, a)
		}
	}
}

func TestDecodeVMAnnotationsRefuses(t *testing.T) {
	restore := map[string]string{AnnotationBoot: BootRestore, AnnotationRestoreKind: RestoreKindSnapshot,
		AnnotationRestoreUID: "u", AnnotationRestoreLocation: "snapshots/u"}
	with := func(base map[string]string, kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		name string
		in   map[string]string
		want string // a part of the error; "" means accepted
	}{
		{"empty is a cold boot at the node's defaults", map[string]string{}, ""},
		{"restore", restore, ""},
		{"vcpu not a number", map[string]string{AnnotationVCPU: "many"}, AnnotationVCPU},
		{"vcpu zero", map[string]string{AnnotationVCPU: "0"}, AnnotationVCPU},
		{"vcpu above the bound", map[string]string{AnnotationVCPU: "65"}, "[1, 64]"},
		{"memory below the bound", map[string]string{AnnotationMemoryMiB: "63"}, AnnotationMemoryMiB},
		{"memory above the bound", map[string]string{AnnotationMemoryMiB: "262145"}, "[64, 262144]"},
		{"memory overflowing int32", map[string]string{AnnotationMemoryMiB: "99999999999"}, AnnotationMemoryMiB},
		{"layer below the bound", map[string]string{AnnotationWritableLayerMiB: "15"}, AnnotationWritableLayerMiB},
		{"unknown boot", map[string]string{AnnotationBoot: "pxe"}, AnnotationBoot},
		{"restore keys on a cold boot", map[string]string{AnnotationRestoreLocation: "/etc"}, AnnotationRestoreLocation},
		{"restore of an unknown kind", with(restore, AnnotationRestoreKind, "Secret"), AnnotationRestoreKind},
		{"restore without a UID", with(restore, AnnotationRestoreUID, ""), AnnotationRestoreUID},
		{"restore without a location", with(restore, AnnotationRestoreLocation, ""), AnnotationRestoreLocation},
		{"claim that is not JSON", map[string]string{AnnotationPool: "p", AnnotationClaim: "{"}, AnnotationClaim},
		{"claim on a pod that is no pool pod", map[string]string{AnnotationClaim: `{"sandbox":"s","sandboxID":"` + testID + `"}`}, AnnotationPool},
		{"claim with a bad sandbox ID", map[string]string{AnnotationPool: "p", AnnotationClaim: `{"sandbox":"s","sandboxID":"X"}`}, "sandbox ID"},
		{"claim restoring an unknown kind", map[string]string{AnnotationPool: "p", AnnotationClaim: `{"sandbox":"s","sandboxID":"` + testID +
			`","restore":{"kind":"Secret","name":"n","uid":"u","location":"l"}}`}, "restore kind"},
		{"claim restoring without a location", map[string]string{AnnotationPool: "p", AnnotationClaim: `{"sandbox":"s","sandboxID":"` + testID +
			`","restore":{"kind":"Snapshot","name":"n","uid":"u"}}`}, "location"},
		{"bad sandbox ID", map[string]string{AnnotationSandboxID: "ABC"}, AnnotationSandboxID},
		{"slot that is no pool pod", map[string]string{AnnotationBoot: BootSlot}, AnnotationPool},
		{"slot with restore keys", map[string]string{AnnotationBoot: BootSlot, AnnotationPool: "p", AnnotationRestoreUID: "u"}, AnnotationRestoreUID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeVMAnnotations(tc.in)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("accepted, want an error naming %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %q does not name %q", err, tc.want)
			}
		})
	}
}

// TestBoundsMatchCRDs: the CRD markers carry the bounds the codec and the
// shim enforce (markers cannot name Go constants, so this compares them).
func TestBoundsMatchCRDs(t *testing.T) {
	crd := readCRD(t, "sandlot.dev_templates.yaml")
	spec := []string{"spec", "versions", "0", "schema", "openAPIV3Schema", "properties", "spec", "properties"}
	for _, tc := range []struct {
		path   []string
		lo, hi int64
	}{
		{append(spec, "resources", "properties", "vcpu"), MinVCPU, MaxVCPU},
		{append(spec, "resources", "properties", "memoryMiB"), MinMemoryMiB, MaxMemoryMiB},
		{append(spec, "writableLayerMiB"), MinWritableLayerMiB, MaxWritableLayerMiB},
		{append(spec, "slots"), 0, MaxSlotsPerNode},
	} {
		field := lookup(t, crd, tc.path)
		if lo, hi := field["minimum"], field["maximum"]; lo != tc.lo || hi != tc.hi {
			t.Errorf("%s: CRD bounds [%v, %v], codec [%d, %d]", tc.path[len(tc.path)-1], lo, hi, tc.lo, tc.hi)
		}
	}
}

func readCRD(t *testing.T, name string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", name))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func lookup(t *testing.T, m map[string]any, path []string) map[string]any {
	t.Helper()
	var cur any = m
	for _, p := range path {
		switch c := cur.(type) {
		case map[string]any:
			cur = c[p]
		case []any:
			cur = c[0]
		default:
			t.Fatalf("no %s in the CRD (path %v)", p, path)
		}
	}
	out, ok := cur.(map[string]any)
	if !ok {
		t.Fatalf("path %v is no object in the CRD", path)
	}
	return out
}

// TestSource: a claim's restore is what the pod's VM runs from; without
// one, the pod's own restore (or nothing: a cold boot).
func TestSource(t *testing.T) {
	base := &RestoreRef{Kind: RestoreKindSnapshot, Name: "base", UID: "u1", Location: "l1"}
	pkg := &RestoreRef{Kind: RestoreKindPausedSandbox, Name: "sbx", UID: "u2", Location: "l2"}
	for _, tc := range []struct {
		name string
		a    VMAnnotations
		want *RestoreRef
	}{
		{"cold boot", VMAnnotations{}, nil},
		{"restore", VMAnnotations{Restore: base}, base},
		{"warm claim", VMAnnotations{Restore: base, Pool: "p", Claim: &PoolClaim{Sandbox: "s", SandboxID: testID}}, base},
		{"restore claim", VMAnnotations{Restore: base, Pool: "p", Claim: &PoolClaim{Sandbox: "s", SandboxID: testID, Restore: pkg}}, pkg},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := tc.a.Encode()
			if err != nil {
				t.Fatal(err)
			}
			if got := PodSource(m); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("source %+v, want %+v", got, tc.want)
			}
		})
	}
	if PodSource(map[string]string{AnnotationBoot: "pxe"}) != nil {
		t.Fatal("annotations that do not decode have a source")
	}
}

func TestClaimPendingAndRestoresFrom(t *testing.T) {
	pkg := &RestoreRef{Kind: RestoreKindPausedSandbox, Name: "sbx", UID: "u2", Location: "l2"}
	claimed, err := VMAnnotations{Pool: "p", Restore: &RestoreRef{Kind: RestoreKindSnapshot, Name: "b", UID: "u1", Location: "l1"},
		Claim: &PoolClaim{Sandbox: "s", SandboxID: testID, Restore: pkg}}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !ClaimPending(claimed) || ClaimPending(map[string]string{}) {
		t.Fatal("a claim not carried out is pending; no claim is not")
	}
	if !PodRestoresFrom(claimed, "u2") || PodRestoresFrom(claimed, "u1") {
		t.Fatal("a restore claim's pod restores the claim's data, not the pool's base")
	}
	claimed[AnnotationClaimActivated] = claimed[AnnotationClaim]
	if ClaimPending(claimed) {
		t.Fatal("a claim carried out is still pending")
	}
}
