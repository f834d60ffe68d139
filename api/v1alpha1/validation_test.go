package v1alpha1_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/test/kube"
)

var env *kube.Env

func TestMain(m *testing.M) {
	var err error
	if env, err = kube.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

func object(t *testing.T, manifest string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
		t.Fatalf("bad test manifest: %v", err)
	}
	if u.GetNamespace() == "" {
		u.SetNamespace("default")
	}
	return u
}

const (
	goodTemplate = `{apiVersion: sandlot.dev/v1alpha1, kind: Template, metadata: {name: %s}, spec: {image: "python:3.12"}}`
	goodSandbox  = `{apiVersion: sandlot.dev/v1alpha1, kind: Sandbox, metadata: {name: %s}, spec: {source: {template: python}}}`
	goodSnapshot = `{apiVersion: sandlot.dev/v1alpha1, kind: Snapshot, metadata: {name: %s}, spec: {source: {sandbox: a}}}`
)

// TestRejectsBadManifests: the API server itself refuses each, naming the field.
func TestRejectsBadManifests(t *testing.T) {
	cases := []struct {
		name, manifest, field string
	}{
		{"sandbox with two sources", `{apiVersion: sandlot.dev/v1alpha1, kind: Sandbox, metadata: {name: two}, spec: {source: {template: a, snapshot: b}}}`,
			"spec.source: Invalid value: source needs exactly one of template and snapshot"},
		{"sandbox with an empty source", `{apiVersion: sandlot.dev/v1alpha1, kind: Sandbox, metadata: {name: nosrc}, spec: {source: {}}}`,
			"spec.source: Invalid value: source needs exactly one"},
		{"sandbox without spec.source", `{apiVersion: sandlot.dev/v1alpha1, kind: Sandbox, metadata: {name: nospec}, spec: {}}`,
			"spec.source: Required value"},
		{"template with negative memory", `{apiVersion: sandlot.dev/v1alpha1, kind: Template, metadata: {name: negmem}, spec: {image: "python:3", resources: {vcpu: 1, memoryMiB: -512}}}`,
			"spec.resources.memoryMiB: Invalid value: -512"},
		{"template with zero vCPU", `{apiVersion: sandlot.dev/v1alpha1, kind: Template, metadata: {name: zerocpu}, spec: {image: "python:3", resources: {vcpu: 0, memoryMiB: 512}}}`,
			"spec.resources.vcpu: Invalid value: 0"},
		{"sandbox asking for 65 vCPUs", `{apiVersion: sandlot.dev/v1alpha1, kind: Sandbox, metadata: {name: bigcpu}, spec: {source: {template: a}, resources: {vcpu: 65}}}`,
			"spec.resources.vcpu: Invalid value: 65"},
		{"sandbox with a zero timeout", `{apiVersion: sandlot.dev/v1alpha1, kind: Sandbox, metadata: {name: t0}, spec: {source: {template: a}, timeoutSeconds: 0}}`,
			"spec.timeoutSeconds: Invalid value: 0"},
		{"sandbox with a bare * rule", `{apiVersion: sandlot.dev/v1alpha1, kind: Sandbox, metadata: {name: ruleip}, spec: {source: {template: a}, network: {rules: [{domain: "a.example", headers: [{name: X, value: "v"}]}, {domain: "*", headers: [{name: X, value: "v"}]}]}}}`,
			"spec.network.rules[1].domain: Invalid value"},
		{"sandbox with a rule twice", `{apiVersion: sandlot.dev/v1alpha1, kind: Sandbox, metadata: {name: ruletwice}, spec: {source: {template: a}, network: {rules: [{domain: a.example, headers: [{name: X, value: "v"}]}, {domain: a.example, headers: [{name: Z, value: "v"}]}]}}}`,
			"rules: each domain once"},
		{"sandbox resumed by sleep", `{apiVersion: sandlot.dev/v1alpha1, kind: Sandbox, metadata: {name: sleepy}, spec: {source: {template: a}, resumeBy: Sleep}}`,
			"spec.resumeBy: Unsupported value"},
		{"sandbox with a timeout over 30 days", `{apiVersion: sandlot.dev/v1alpha1, kind: Sandbox, metadata: {name: tbig}, spec: {source: {template: a}, timeoutSeconds: 2592001}}`,
			"spec.timeoutSeconds: Invalid value: 2592001"},
		{"sandbox name with a dot", `{apiVersion: sandlot.dev/v1alpha1, kind: Sandbox, metadata: {name: my.sandbox}, spec: {source: {template: a}}}`,
			"metadata.name must be a DNS label"},
		{"template name of 64 chars", `{apiVersion: sandlot.dev/v1alpha1, kind: Template, metadata: {name: ` + strings.Repeat("a", 64) + `}, spec: {image: "python:3"}}`,
			"metadata.name must be a DNS label"},
		{"env var with a bad name", `{apiVersion: sandlot.dev/v1alpha1, kind: Sandbox, metadata: {name: badenv}, spec: {source: {template: a}, env: [{name: 1BAD, value: x}]}}`,
			"spec.env[0].name: Invalid value: \"1BAD\""},
		{"template image with a space", `{apiVersion: sandlot.dev/v1alpha1, kind: Template, metadata: {name: badimg}, spec: {image: "python 3"}}`,
			"spec.image: Invalid value: \"python 3\""},
		{"template without image", `{apiVersion: sandlot.dev/v1alpha1, kind: Template, metadata: {name: noimg}, spec: {}}`,
			"spec.image: Required value"},
		{"template with a 1 MiB writable layer", `{apiVersion: sandlot.dev/v1alpha1, kind: Template, metadata: {name: tinydisk}, spec: {image: "python:3", writableLayerMiB: 1}}`,
			"spec.writableLayerMiB: Invalid value: 1"},
		{"build COPY without its files", `{apiVersion: sandlot.dev/v1alpha1, kind: Template, metadata: {name: copynofiles}, spec: {image: "python:3", build: {steps: [{type: COPY, args: [a, /b]}]}}}`,
			"a COPY step needs filesHash"},
		{"build step of an unknown type", `{apiVersion: sandlot.dev/v1alpha1, kind: Template, metadata: {name: addstep}, spec: {image: "python:3", build: {steps: [{type: ADD, args: [a, /b]}]}}}`,
			"Unsupported value"},
		{"build files hash not hex", `{apiVersion: sandlot.dev/v1alpha1, kind: Template, metadata: {name: badhash}, spec: {image: "python:3", build: {steps: [{type: COPY, args: [a, /b], filesHash: "../x"}]}}}`,
			"filesHash"},
		{"readiness probe with two checks", `{apiVersion: sandlot.dev/v1alpha1, kind: Template, metadata: {name: twoprobes}, spec: {image: "python:3", readinessProbe: {httpGet: {port: 49999}, tcpSocket: {port: 49983}}}}`,
			"spec.readinessProbe: Invalid value: readinessProbe needs exactly one"},
		{"snapshot without a source", `{apiVersion: sandlot.dev/v1alpha1, kind: Snapshot, metadata: {name: nosrc}, spec: {source: {}}}`,
			"spec.source: Invalid value: source needs exactly one of sandbox and import"},
		{"rollback without a requestID", `{apiVersion: sandlot.dev/v1alpha1, kind: Sandbox, metadata: {name: rb}, spec: {source: {template: a}, rollback: {snapshot: s}}}`,
			"spec.rollback.requestID: Required value"},
		{"unknown timeout action", `{apiVersion: sandlot.dev/v1alpha1, kind: Sandbox, metadata: {name: ontimeout}, spec: {source: {template: a}, onTimeout: Explode}}`,
			"spec.onTimeout: Unsupported value: \"Explode\""},
		{"paused sandbox with a bad sandboxID", `{apiVersion: sandlot.dev/v1alpha1, kind: PausedSandbox, metadata: {name: badid}, spec: {sandboxID: ABC, nodeName: n, podName: p, vm: {}}}`,
			"spec.sandboxID: Invalid value: \"ABC\""},
		{"volume mount at a path with ..", `{apiVersion: sandlot.dev/v1alpha1, kind: Sandbox, metadata: {name: volup}, spec: {source: {template: a}, volumeMounts: [{name: d, path: /mnt/../etc}]}}`,
			"path is absolute, not /, without . or .. elements"},
		{"volume mount at /", `{apiVersion: sandlot.dev/v1alpha1, kind: Sandbox, metadata: {name: volroot}, spec: {source: {template: a}, volumeMounts: [{name: d, path: /}]}}`,
			"spec.volumeMounts[0].path"},
		{"two volume mounts on one path", `{apiVersion: sandlot.dev/v1alpha1, kind: Sandbox, metadata: {name: voltwice}, spec: {source: {template: a}, volumeMounts: [{name: a, path: /m}, {name: b, path: /m}]}}`,
			"volumeMounts: each path once"},
		{"volume with a bad name", `{apiVersion: sandlot.dev/v1alpha1, kind: Volume, metadata: {name: vol-x}, spec: {name: "a b"}}`,
			"spec.name: Invalid value: \"a b\""},
		{"sandbox naming a template with a bad name", `{apiVersion: sandlot.dev/v1alpha1, kind: Sandbox, metadata: {name: badref}, spec: {source: {template: Python_3}}}`,
			"spec.source.template: Invalid value: \"Python_3\""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := env.Client.Create(context.Background(), object(t, tc.manifest))
			if err == nil {
				t.Fatalf("accepted; want a rejection naming %q", tc.field)
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want an Invalid error, got %v", err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("error does not name the field:\n got: %v\nwant: %s", err, tc.field)
			}
		})
	}
}

// goodPaused is a PausedSandbox as the controller writes it (%s: name).
const goodPaused = `{apiVersion: sandlot.dev/v1alpha1, kind: PausedSandbox, metadata: {name: %s},
  spec: {sandboxID: abcdefghij0123456789, nodeName: node-a, podName: pod-a, vm: {image: "registry.local/a:1"},
    dependsOn: {kind: Snapshot, name: base, uid: u}}}`

// withSecret is a sandbox whose network rules name a Secret.
const withSecret = `{apiVersion: sandlot.dev/v1alpha1, kind: Sandbox, metadata: {name: secret},
  spec: {source: {template: a}, network: {secretName: s}}}`

// TestRejectsChangedSource: a sandbox's source, a snapshot's source and
// everything of a pause package but its expiry are immutable; the expiry
// of a snapshot or a package may be set or changed later (want "").
func TestRejectsChangedSource(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name, manifest, path, value, want string
	}{
		{"sandbox source", fmt.Sprintf(goodSandbox, "immut"), "source", `{"snapshot": "s"}`, "spec.source: Invalid value: source is immutable"},
		{"snapshot source", fmt.Sprintf(goodSnapshot, "immut"), "source", `{"sandbox": "other"}`, "spec: Invalid value: spec.source is immutable"},
		{"snapshot expiry", fmt.Sprintf(goodSnapshot, "expiry"), "expireAfterSeconds", `60`, ""},
		{"sandbox rules' secret", withSecret, "network", `{"secretName": "other"}`, "network.secretName is immutable"},
		{"sandbox rules, secret kept", strings.Replace(withSecret, "name: secret", "name: secret2", 1), "network",
			`{"secretName": "s", "rules": [{"domain": "a.example", "headers": [{"name": "X", "value": "y"}]}]}`, ""},
		{"package node", fmt.Sprintf(goodPaused, "node"), "nodeName", `other`, "spec is immutable except expireAfterSeconds"},
		{"package dependsOn", fmt.Sprintf(goodPaused, "deps"), "dependsOn", `{"kind": "Snapshot", "name": "x", "uid": "v"}`, "spec is immutable except expireAfterSeconds"},
		{"package vm", fmt.Sprintf(goodPaused, "vm"), "vm", `{"image": "registry.local/b:1"}`, "spec is immutable except expireAfterSeconds"},
		{"package expiry", fmt.Sprintf(goodPaused, "expiry"), "expireAfterSeconds", `5`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u := object(t, tc.manifest)
			if err := env.Client.Create(ctx, u); err != nil {
				t.Fatalf("create: %v", err)
			}
			var v any
			_ = yaml.Unmarshal([]byte(tc.value), &v)
			_ = unstructured.SetNestedField(u.Object, v, "spec", tc.path)
			err := env.Client.Update(ctx, u)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("update of spec.%s refused: %v", tc.path, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("update: got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestAcceptsGoodManifests guards against rules so strict nothing passes,
// and checks the defaults the API server fills in.
func TestAcceptsGoodManifests(t *testing.T) {
	ctx := context.Background()
	for _, m := range []string{fmt.Sprintf(goodTemplate, "good"), fmt.Sprintf(goodSandbox, "good"), fmt.Sprintf(goodSnapshot, "good"),
		`{apiVersion: sandlot.dev/v1alpha1, kind: Template, metadata: {name: digest}, spec: {image: "registry.local:5000/team/py@sha256:` + strings.Repeat("ab", 32) + `"}}`,
		`{apiVersion: sandlot.dev/v1alpha1, kind: Template, metadata: {name: built}, spec: {image: "python:3", build: {id: 0123456789abcdef-1x256, startCmd: serve, readyCmd: "true",
			steps: [{type: ENV, args: [A, b]}, {type: COPY, args: [a, /b], filesHash: ` + strings.Repeat("ab", 32) + `}, {type: RUN, args: ["make", root]}, {type: WORKDIR, args: [/app]}, {type: USER, args: [user]}]}}}`} {
		if err := env.Client.Create(ctx, object(t, m)); err != nil {
			t.Fatalf("rejected %s: %v", m, err)
		}
	}
	tpl := object(t, fmt.Sprintf(goodTemplate, "good"))
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(tpl), tpl); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]int64{"resources.vcpu": 1, "resources.memoryMiB": 512, "writableLayerMiB": 1024, "timeoutSeconds": 300} {
		got, _, _ := unstructured.NestedInt64(tpl.Object, append([]string{"spec"}, strings.Split(path, ".")...)...)
		if got != want {
			t.Errorf("default spec.%s = %d, want %d", path, got, want)
		}
	}
}

// TestSandboxIDFor: 20 chars of [a-z0-9], stable per UID, distinct across UIDs.
func TestSandboxIDFor(t *testing.T) {
	seen := map[string]bool{}
	for i := range 1000 {
		uid := types.UID(fmt.Sprintf("uid-%d", i))
		id := sandlotv1.SandboxIDFor(uid)
		if !regexp.MustCompile(`^[a-z0-9]{20}$`).MatchString(id) {
			t.Fatalf("SandboxIDFor(%q) = %q, not 20 chars of [a-z0-9]", uid, id)
		}
		if id != sandlotv1.SandboxIDFor(uid) {
			t.Fatalf("SandboxIDFor(%q) is not stable", uid)
		}
		if seen[id] {
			t.Fatalf("SandboxIDFor collided on %q", id)
		}
		seen[id] = true
	}
}

// TestBoundsGuestVersion: status.guestVersion (from a guest, which is not
// trusted) is refused by the API server when long or not version-shaped,
// even if the shim's own check let it through.
func TestBoundsGuestVersion(t *testing.T) {
	ctx := context.Background()
	u := object(t, fmt.Sprintf(goodSandbox, "guestver"))
	if err := env.Client.Create(ctx, u); err != nil {
		t.Fatalf("create: %v", err)
	}
	for v, want := range map[string]string{
		"0.2.0-dev":             "",
		strings.Repeat("9", 65): "status.guestVersion: Too long",
		"0.2.0 \x1b[31m":        "guestVersion in body should match",
	} {
		_ = unstructured.SetNestedField(u.Object, v, "status", "guestVersion")
		err := env.Client.Status().Update(ctx, u)
		switch {
		case want == "" && err != nil:
			t.Fatalf("guestVersion %q refused: %v", v, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Fatalf("guestVersion %.20q: got %v, want an error containing %q", v, err, want)
		}
		if err == nil {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
				t.Fatal(err)
			}
		}
	}
}
