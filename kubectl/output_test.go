package kubectl

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestOutputOfCommandsThatChangeObjects: -o prints the objects a command
// made or changed, alone on stdout (the command's lines go to stderr):
// one object as itself, several as a List, name as kind.group/name.
func TestOutputOfCommandsThatChangeObjects(t *testing.T) {
	f, ns := setup(t)
	f.template(t, ns, "python")

	res := f.ok(t, ns, "create", "--template", "python", "box", "-o", "json")
	var sbx sandlotv1.Sandbox
	if err := json.Unmarshal([]byte(res.out), &sbx); err != nil {
		t.Fatalf("create -o json is not a Sandbox: %v\n%s", err, res.out)
	}
	if sbx.Kind != "Sandbox" || sbx.APIVersion != "sandlot.dev/v1alpha1" || sbx.Name != "box" || sbx.UID == "" {
		t.Errorf("create -o json: %s %s %s uid %q", sbx.APIVersion, sbx.Kind, sbx.Name, sbx.UID)
	}
	contains(t, "create -o json stderr", res.errOut, "sandbox/box created")
	if strings.Contains(res.out, "managedFields") {
		t.Errorf("-o json shows managedFields (kubectl leaves them out):\n%s", res.out)
	}

	res = f.ok(t, ns, "create", "--template", "python", "-o", "name")
	if !regexp.MustCompile(`^sandbox\.sandlot\.dev/python-[a-z0-9]+\n$`).MatchString(res.out) {
		t.Errorf("create -o name: %q", res.out)
	}
	if res = f.ok(t, ns, "create", "--template", "python", "gt", "-o", "go-template={{.metadata.name}}"); res.out != "gt" {
		t.Errorf("create -o go-template: %q", res.out)
	}
	wide := rows(f.ok(t, ns, "create", "--template", "python", "wide", "-o", "wide").out)
	if h := strings.Join(wide[0], " "); h != "NAME PHASE ID NODE SOURCE AGE IP EXPIRES VMREADY" || wide[1][0] != "wide" {
		t.Errorf("create -o wide: %q", wide)
	}

	f.running(t, &sbx, "node-1", "10.0.0.2")
	var snap sandlotv1.Snapshot
	res = f.ok(t, ns, "snapshot", "box", "--name", "s1", "-o", "yaml")
	if err := yaml.Unmarshal([]byte(res.out), &snap); err != nil || snap.Kind != "Snapshot" || snap.Spec.Source.Sandbox != "box" {
		t.Errorf("snapshot -o yaml (%v):\n%s", err, res.out)
	}
	contains(t, "snapshot -o yaml stderr", res.errOut, "snapshot/s1 created from sandbox/box")

	testCloneOutput(t, f, ns)
	testLifecycleOutput(t, f, ns)
}

func testCloneOutput(t *testing.T, f *fixture, ns string) {
	t.Helper()
	res := f.ok(t, ns, "clone", "s1", "--count", "2", "-o", "json")
	var list sandlotv1.SandboxList
	if err := json.Unmarshal([]byte(res.out), &list); err != nil {
		t.Fatalf("clone -o json: %v\n%s", err, res.out)
	}
	if list.Kind != "List" || len(list.Items) != 2 || list.Items[0].Kind != "Sandbox" || list.Items[1].Spec.Source.Snapshot != "s1" {
		t.Errorf("clone --count 2 -o json: a List of 2 Sandboxes from s1, got %s of %d: %+v", list.Kind, len(list.Items), list.Items)
	}
	if out := f.ok(t, ns, "clone", "s1", "-o", "name").out; !regexp.MustCompile(`^sandbox\.sandlot\.dev/s1-[a-z0-9]+\n$`).MatchString(out) {
		t.Errorf("clone -o name: %q", out)
	}
	// A clone of a sandbox prints the snapshot it took too.
	out := f.ok(t, ns, "clone", "sandbox/box", "-o", "name").out
	if !regexp.MustCompile(`^snapshot\.sandlot\.dev/box-[a-z0-9]+\nsandbox\.sandlot\.dev/box-[a-z0-9]+-[a-z0-9]+\n$`).MatchString(out) {
		t.Errorf("clone sandbox/box -o name: %q", out)
	}
}

func testLifecycleOutput(t *testing.T, f *fixture, ns string) {
	t.Helper()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"pause", "box", "-o", "name"}, "sandbox.sandlot.dev/box\n"},
		{[]string{"resume", "box", "-o", "jsonpath={.metadata.generation}"}, "3"}, // create, pause, resume
		{[]string{"rollback", "box", "--to", "s1", "-o", "jsonpath={.spec.rollback.snapshot}"}, "s1"},
		{[]string{"delete", "box", "-o", "name"}, "sandbox.sandlot.dev/box\n"},
	}
	for _, c := range cases {
		if res := f.ok(t, ns, c.args...); res.out != c.want {
			t.Errorf("%s: stdout %q, want %q (stderr %q)", strings.Join(c.args, " "), res.out, c.want, res.errOut)
		}
	}
}

// TestOutputAfterWaitIsTheFinalObject: with --wait, -o prints the object
// as the wait left it.
func TestOutputAfterWaitIsTheFinalObject(t *testing.T) {
	f, ns := setup(t)
	f.template(t, ns, "python")

	cmd := f.start(ns, "create", "--template", "python", "box", "--wait", "-o", "json")
	sbx := &sandlotv1.Sandbox{}
	f.waitExists(t, ns, "box", sbx)
	f.running(t, sbx, "node-1", "10.0.0.9")
	res := cmd.wait(t, 10*time.Second)
	if res.err != nil {
		t.Fatalf("create --wait -o json: %v\n%s", res.err, res.errOut)
	}
	var got sandlotv1.Sandbox
	if err := json.Unmarshal([]byte(res.out), &got); err != nil {
		t.Fatalf("stdout is not one Sandbox: %v\n%s", err, res.out)
	}
	if got.Status.PodIP != "10.0.0.9" || got.Status.PodName != "box-pod" || !got.Usable(0) {
		t.Errorf("-o json after --wait: status %+v, want the usable sandbox", got.Status)
	}
	contains(t, "stderr", res.errOut, "sandbox/box created", "sandbox/box ready: id")
}

// TestUnknownOutputFormatsNameTheAllowedOnes: before any API call.
func TestUnknownOutputFormatsNameTheAllowedOnes(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"ls", "-o", "xml"}, `unknown output format "xml": allowed: wide, json, yaml, `},
		{[]string{"ls", "templates", "-o", "table"}, `unknown output format "table": allowed: wide, json, yaml, `},
		{[]string{"create", "--template", "t", "-o", "xml"}, `unknown output format "xml": allowed: wide, json, yaml, `},
		{[]string{"snapshot", "box", "-o", "xml"}, `unknown output format "xml": allowed: wide, json, yaml, `},
		{[]string{"clone", "s", "-o", "xml"}, `unknown output format "xml": allowed: wide, json, yaml, `},
		{[]string{"pause", "box", "-o", "xml"}, `unknown output format "xml": allowed: wide, json, yaml, `},
		{[]string{"resume", "box", "-o", "xml"}, `unknown output format "xml": allowed: wide, json, yaml, `},
		{[]string{"rollback", "box", "--to", "s", "-o", "xml"}, `unknown output format "xml": allowed: wide, json, yaml, `},
		{[]string{"delete", "box", "-o", "json"}, `unknown output format "json": allowed: name`},
		{[]string{"version", "-o", "wide"}, `unknown output format "wide": allowed: json, yaml`},
		{[]string{"ls", "-o", "jsonpath"}, `-o jsonpath: template format specified but no template given`},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, "_"), func(t *testing.T) {
			_, err := runLocal(c.args...)
			wantError(t, err, c.want)
			if strings.HasSuffix(c.want, "allowed: wide, json, yaml, ") {
				wantError(t, err, "name", "jsonpath", "go-template")
			}
		})
	}
}
