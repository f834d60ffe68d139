package e2b

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/nodeagent"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

// domain is the sandbox domain of the domain-mode run: the SDK reaches
// port p of a sandbox at https://<p>-<id>.sandlot.test, the chart's API
// Service's 443.
const (
	domain   = "sandlot.test"
	template = "default"
)

// TestSDK runs sdk.test.mjs twice against one sandlot-api: with
// E2B_SANDBOX_URL (sandbox traffic named by headers) and with E2B_DOMAIN
// (sandbox traffic named by host name, over TLS).
func TestSDK(t *testing.T) {
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: install Node 20 and npm (the E2B SDK runs on them)", tool)
		}
	}
	if out, err := npm("ci", "--no-audit", "--no-fund"); err != nil {
		t.Fatalf("npm ci (installs the pinned e2b and @e2b/code-interpreter): %v\n%s", err, out)
	}
	k := sbxtest.Client(t, c)
	start := time.Now()
	// 512 MiB, as E2B's code-interpreter sandboxes: python with pandas, node
	// with TypeScript and bash contexts side by side.
	sbxtest.TemplateOf(t, k, "default", template, sbxtest.InterpreterImage(t), 512)
	withSlots(t, k)
	t.Logf("the code-interpreter template's base snapshots were Ready on every node in %v", time.Since(start).Round(time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key, err := c.IssueAPIKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keyB := teamOfTwo(t, k)
	token, err := c.IssueAccessToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	apiURL, err := c.APIURL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	apiIP, err := c.APIServiceIP(ctx)
	if err != nil {
		t.Fatal(err)
	}
	base := append([]string{"E2B_API_URL=" + apiURL, "E2B_VOLUME_API_URL=" + apiURL, "E2B_API_KEY=" + key, "SANDLOT_TEAM_B_KEY=" + keyB, "SANDLOT_TEAM_B=" + teamB,
		"SANDLOT_ACCESS_TOKEN=" + token}, inetEnv()...)
	t.Run("template builds", func(t *testing.T) {
		runSDKFile(t, "build.test.mjs", append(base, "E2B_SANDBOX_URL="+apiURL, "SANDLOT_BUILD_IMAGE="+sbxtest.DefaultImage(t)))
	})
	t.Run("sandbox-url", func(t *testing.T) {
		since := time.Now()
		runSDK(t, append(base, "SANDLOT_MODE=sandbox-url", "E2B_SANDBOX_URL="+apiURL))
		slotClaims(t, k, since)
	})
	t.Run("domain", func(t *testing.T) {
		runSDK(t, append(base, "SANDLOT_MODE=domain", "E2B_DOMAIN="+domain,
			"NODE_EXTRA_CA_CERTS="+c.PKI.CACert, "SANDLOT_TEST_DOMAIN="+domain, "SANDLOT_TEST_IP="+apiIP),
			"--import", "./resolve.mjs")
	})
	// The Python SDKs, the same two ways.
	venv := pythonVenv(t)
	t.Run("python sandbox-url", func(t *testing.T) {
		runPython(t, venv, append(base, "SANDLOT_MODE=sandbox-url", "E2B_SANDBOX_URL="+apiURL,
			"SANDLOT_BUILD_IMAGE="+sbxtest.DefaultImage(t)), "")
	})
	t.Run("python domain", func(t *testing.T) { // the builds ran above
		runPython(t, venv, append(base, "SANDLOT_MODE=domain", "E2B_DOMAIN="+domain, "SSL_CERT_FILE="+c.PKI.CACert),
			apiIP, "--ignore=test_template.py")
	})
}

// withSlots gives the default template a start slot per node and waits
// until they run: the SDK's creates, resumes, snapshots' sandboxes and
// forks land in slots while there are some, pods of their own otherwise.
func withSlots(t *testing.T, k client.Client) {
	t.Helper()
	ctx := context.Background()
	tpl := &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Name: template, Namespace: "default"}}
	if err := k.Patch(ctx, tpl, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"slots":1}}`))); err != nil {
		t.Fatalf("start slots for the default template: %v", err)
	}
	poll.Eventually(t, 2*time.Minute, "a start slot on every node", func() error {
		if err := k.Get(ctx, client.ObjectKeyFromObject(tpl), tpl); err != nil {
			return err
		}
		n := 0
		for _, p := range tpl.Status.Pool {
			if p.Slots >= 1 {
				n++
			}
		}
		if n < len(c.Nodes) {
			return fmt.Errorf("pool %+v", tpl.Status.Pool)
		}
		return nil
	})
}

// slotClaims is what the node agents say restored into start slots since
// the run began: the SDK's starts must have used them.
func slotClaims(t *testing.T, k client.Client, since time.Time) {
	t.Helper()
	evs := &eventsv1.EventList{}
	if err := k.List(context.Background(), evs, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs.Items {
		if e.Reason == nodeagent.ReasonClaimActivated && strings.HasPrefix(e.Note, "start slot ") && !e.CreationTimestamp.Time.Before(since.Truncate(time.Second)) {
			t.Logf("claim: %s", e.Note)
			n++
		}
	}
	if n == 0 {
		t.Fatalf("no start slot was claimed by the SDK's starts (the default template keeps one per node)")
	}
}

// teamB is a second team: a key of its own, a template of the small image
// and a quota of two sandboxes (sdk.test.mjs tries a third and the other
// team's sandboxes).
const teamB = "team-b"

func teamOfTwo(t *testing.T, k client.Client) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sbxtest.TemplateOf(t, k, teamB, template, sbxtest.DefaultImage(t), 256)
	name := corev1.ResourceName("count/sandboxes.sandlot.dev")
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "sandboxes", Namespace: teamB},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{name: resource.MustParse("2")}}}
	if err := k.Create(ctx, quota); err != nil {
		t.Fatal(err)
	}
	// Quota admission refuses every create ("status unknown") until the
	// quota controller has counted: it learns a CRD's resource by
	// discovery (every 30 s), and a quota synced before that waits for the
	// next period (5 min). Only a change of spec.hard syncs it again (not
	// one of its metadata): a spare limit comes and goes until it counts.
	spare, last := corev1.ResourceName("count/configmaps"), time.Time{}
	poll.Eventually(t, 3*time.Minute, "team-b's quota counted", func() error {
		if err := k.Get(ctx, client.ObjectKeyFromObject(quota), quota); err != nil {
			return err
		}
		if _, ok := quota.Status.Used[name]; ok {
			return nil
		}
		if time.Since(last) > 5*time.Second {
			if _, ok := quota.Spec.Hard[spare]; ok {
				delete(quota.Spec.Hard, spare)
			} else {
				quota.Spec.Hard[spare] = resource.MustParse("1000")
			}
			if err := k.Update(ctx, quota); err != nil {
				return err
			}
			last = time.Now()
		}
		return fmt.Errorf("status %v", quota.Status)
	})
	key, err := c.IssueAPIKey(ctx, "--team="+teamB)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// runSDK runs sdk.test.mjs with env; each of its tests is reported.
func runSDK(t *testing.T, env []string, nodeArgs ...string) {
	runSDKFile(t, "sdk.test.mjs", env, nodeArgs...)
}

// runSDKFile runs one Node test file of test/e2b with env.
func runSDKFile(t *testing.T, file string, env []string, nodeArgs ...string) {
	args := append(nodeArgs, "--test", "--test-concurrency=1", "--test-reporter=spec", file)
	if p := os.Getenv("SANDLOT_SDK_TESTS"); p != "" { // a developer's focus: the tests whose names match
		args = append(args[:len(args)-1], "--test-name-pattern="+p, file)
	}
	runSuite(t, "the E2B SDK tests", filepath.Join(cluster.RepoRoot(), "test", "e2b"), env, "node", args...)
}

// runSuite runs a test program in dir with env added, its output on the
// test's, failing t when it fails; what names it in the log.
func runSuite(t *testing.T, what, dir string, env []string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s failed after %v: %v (output above)", what, time.Since(start).Round(time.Second), err)
	}
	t.Logf("%s passed in %v", what, time.Since(start).Round(time.Second))
}

func npm(args ...string) ([]byte, error) {
	cmd := exec.Command("npm", args...)
	cmd.Dir = filepath.Join(cluster.RepoRoot(), "test", "e2b")
	return cmd.CombinedOutput()
}
