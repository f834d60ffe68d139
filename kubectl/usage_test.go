package kubectl

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	utilexec "k8s.io/client-go/util/exec"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// runLocal runs a command that must fail before it talks to any API
// server (the kubeconfig points nowhere).
func runLocal(args ...string) (string, error) {
	var out, errOut bytes.Buffer
	cmd := NewRootCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	cmd.SetArgs(append([]string{"--kubeconfig", "/nonexistent/kubeconfig"}, args...))
	err := cmd.Execute()
	return out.String() + errOut.String(), err
}

func TestUsageErrorsExplainThemselves(t *testing.T) {
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"pause"}, []string{"kubectl sandlot pause expects exactly one SANDBOX, got 0 argument(s)", "Example:", "kubectl sandlot pause my-sandbox --wait"}},
		{[]string{"resume", "a", "b"}, []string{"kubectl sandlot resume expects exactly one SANDBOX, got 2 argument(s): a b", "kubectl sandlot resume my-sandbox"}},
		{[]string{"clone"}, []string{"expects exactly one SNAPSHOT or SANDBOX", "kubectl sandlot clone my-snapshot --count 3"}},
		{[]string{"delete"}, []string{"expects one or more SANDBOX names"}},
		{[]string{"ls", "a", "b"}, []string{"expects at most one kind"}},
		{[]string{"create", "a", "b", "--template", "t"}, []string{"expects at most one NAME"}},
		{[]string{"create", "box"}, []string{"--template is required", "kubectl sandlot create --template python my-sandbox"}},
		{[]string{"create", "--template", "t", "--lifetime", "0s"}, []string{"--lifetime: 0s is outside 1s..720h0m0s"}},
		{[]string{"create", "--template", "t", "--lifetime", "0"}, []string{"--lifetime: 0s is outside 1s..720h0m0s"}},
		{[]string{"create", "--template", "t", "--lifetime", "2592001"}, []string{"--lifetime: 720h0m1s is outside 1s..720h0m0s"}},
		{[]string{"create", "--template", "t", "--lifetime", "31d"}, []string{"invalid argument \"31d\"", "a duration (10m, 1h30m) or seconds (600)", "See 'kubectl sandlot create --help'"}},
		{[]string{"create", "--template", "t", "--timeout", "10m"}, []string{"--timeout bounds --wait: add --wait (the sandbox's lifetime is --lifetime)"}},
		{[]string{"create", "--template", "t", "--metadata", "novalue"}, []string{`--metadata "novalue": expected key=value`}},
		{[]string{"create", "--template", "t", "--env", "1X=y"}, []string{`--env "1X=y": expected NAME=value`}},
		{[]string{"create", "--template", "t", "--wait-timeout", "1m"}, []string{"--timeout bounds --wait: add --wait"}},
		{[]string{"create", "--template", "t", "--wait", "--timeout", "0s"}, []string{"--timeout must be positive, got 0s"}},
		{[]string{"pause", "box", "--timeout", "1m"}, []string{"--timeout bounds --wait: add --wait"}},
		{[]string{"clone", "s", "--count", "101"}, []string{"--count 101 is outside 1..100"}},
		{[]string{"rollback", "box"}, []string{"--to is required", "kubectl sandlot rollback my-sandbox --to before-upgrade"}},
		{[]string{"snapshot", "box", "--bogus"}, []string{"unknown flag: --bogus", "See 'kubectl sandlot snapshot --help' for usage"}},
		{[]string{"frobnicate"}, []string{`unknown command "frobnicate" for "kubectl sandlot"`}},
		{[]string{"logs"}, []string{"kubectl sandlot logs expects exactly one SANDBOX, got 0", "kubectl sandlot logs my-sandbox -f --tail 20"}},
		{[]string{"port-forward", "box"}, []string{"port-forward expects SANDBOX and at least one [LOCAL_PORT:]REMOTE_PORT", "kubectl sandlot port-forward my-sandbox 9000:8080 :3000"}},
		{[]string{"port-forward", "box", "http"}, []string{`port "http": the remote port must be a number from 1 to 65535`}},
		{[]string{"port-forward", "box", "8080:0"}, []string{`port "8080:0": the remote port must be a number from 1 to 65535`}},
		{[]string{"port-forward", "box", "70000"}, []string{`port "70000": the remote port must be`}},
		{[]string{"port-forward", "box", "x:8080"}, []string{`port "x:8080": the local port must be a number from 0 to 65535, or empty`}},
		{[]string{"logs", "box", "--tail", "-2"}, []string{"--tail -2: want -1 (all) or more"}},
		{[]string{"logs", "box", "--since", "-1m"}, []string{"--since -1m0s: want a positive duration"}},
		{[]string{"cp", "a"}, []string{"expects SRC and DST, one of them SANDBOX:PATH, got 1", "kubectl sandlot cp ./data.csv my-sandbox:/home/user/data.csv"}},
		{[]string{"cp", "a", "b"}, []string{"cp needs SANDBOX:PATH as SRC or DST"}},
		{[]string{"version", "x"}, []string{"expects no arguments, got 1"}},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, "_"), func(t *testing.T) {
			_, err := runLocal(c.args...)
			wantError(t, err, c.want...)
		})
	}
}

func TestExecArgs(t *testing.T) {
	cases := []struct {
		args    []string
		sandbox string
		command []string
		err     string
	}{
		{args: []string{"box", "--", "ls", "-l", "/"}, sandbox: "box", command: []string{"ls", "-l", "/"}},
		{args: []string{"-it", "box", "--", "bash"}, sandbox: "box", command: []string{"bash"}},
		{args: []string{"box", "--", "sh", "-c", "exit 3", "--", "x"}, sandbox: "box", command: []string{"sh", "-c", "exit 3", "--", "x"}},
		{args: []string{"box", "ls"}, err: "put the command after --: kubectl sandlot exec box -- ls"},
		{args: []string{"box"}, err: "no command given after --"},
		{args: []string{"box", "--"}, err: "no command given after --"},
		{args: []string{"--", "ls"}, err: "no sandbox given"},
		{args: []string{}, err: "no sandbox given"},
		{args: []string{"a", "b", "--", "ls"}, err: "exec takes one SANDBOX before --, got 2: a b"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, "_"), func(t *testing.T) {
			var sandbox string
			var command []string
			cmd := &cobra.Command{Use: "exec", Example: "  example", RunE: func(cmd *cobra.Command, args []string) error {
				var err error
				sandbox, command, err = execArgs(cmd, args)
				return err
			}}
			cmd.Flags().BoolP("stdin", "i", false, "")
			cmd.Flags().BoolP("tty", "t", false, "")
			cmd.SetArgs(c.args)
			cmd.SetOut(&bytes.Buffer{})
			cmd.SetErr(&bytes.Buffer{})
			err := cmd.Execute()
			if c.err != "" {
				wantError(t, err, c.err)
				return
			}
			if err != nil || sandbox != c.sandbox || !slices.Equal(command, c.command) {
				t.Errorf("got %q %q %v, want %q %q", sandbox, command, err, c.sandbox, c.command)
			}
		})
	}
	// Through the plugin, the same errors come before any API call.
	_, err := runLocal("exec", "box", "ls")
	wantError(t, err, "put the command after --", "kubectl sandlot exec my-sandbox -it -- bash")
}

func TestPlanExec(t *testing.T) {
	sbx := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "box", Namespace: "ns1"},
		Status: sandlotv1.SandboxStatus{Phase: sandlotv1.SandboxRunning, PodName: "box-pod"}}
	var errOut bytes.Buffer
	plan, err := planExec(sbx, []string{"python3", "-c", "print(1)"}, &execOptions{stdin: true, tty: true}, strings.NewReader("x"), &errOut)
	if err != nil {
		t.Fatal(err)
	}
	// stdin is no terminal: no TTY, and stderr stays separate.
	want := corev1.PodExecOptions{Container: "sandbox", Command: []string{"python3", "-c", "print(1)"}, Stdin: true, Stdout: true, Stderr: true}
	if plan.pod != "box-pod" || plan.ns != "ns1" || !equalExec(plan.opts, want) {
		t.Errorf("plan %+v, want pod box-pod in ns1 with %+v", plan, want)
	}
	contains(t, "stderr", errOut.String(), "Unable to use a TTY - input is not a terminal")

	errOut.Reset()
	plan, _ = planExec(sbx, []string{"sh"}, &execOptions{tty: true}, strings.NewReader(""), &errOut)
	if plan.opts.TTY || plan.opts.Stdin {
		t.Errorf("-t without -i: %+v", plan.opts)
	}
	contains(t, "stderr", errOut.String(), "Unable to use a TTY without -i")

	paused := sbx.DeepCopy()
	paused.Spec.Paused, paused.Status.Phase, paused.Status.PodName = true, sandlotv1.SandboxPaused, ""
	_, err = planExec(paused, []string{"sh"}, &execOptions{}, nil, &errOut)
	wantError(t, err, "sandbox box has no pod to exec into (phase Paused): it is paused: resume it first")
	failed := sbx.DeepCopy()
	failed.Status.Phase, failed.Status.Reason = sandlotv1.SandboxFailed, sandlotv1.ReasonPodFailed
	_, err = planExec(failed, []string{"sh"}, &execOptions{}, nil, &errOut)
	wantError(t, err, "sandbox box failed: PodFailed")
}

func TestStreamErrorCarriesTheExitCode(t *testing.T) {
	err := streamError(fmt.Errorf("stream: %w", utilexec.CodeExitError{Err: errors.New("command terminated with exit code 3"), Code: 3}), "box-pod")
	var exit *ExitError
	if !errors.As(err, &exit) || exit.Code != 3 {
		t.Errorf("got %v, want *ExitError with code 3", err)
	}
	wantError(t, streamError(errors.New("connection reset"), "box-pod"), "exec in pod box-pod of the sandbox: connection reset")
	if err := streamError(nil, "box-pod"); err != nil {
		t.Errorf("a clean exit gave %v", err)
	}
}

func equalExec(a, b corev1.PodExecOptions) bool {
	return a.Container == b.Container && slices.Equal(a.Command, b.Command) &&
		a.Stdin == b.Stdin && a.Stdout == b.Stdout && a.Stderr == b.Stderr && a.TTY == b.TTY
}

// TestExecRequest checks the request exec sends to the API server: the
// pod's exec subresource, container "sandbox", the command word by word.
func TestExecRequest(t *testing.T) {
	f, _ := setup(t)
	core, err := corev1client.NewForConfig(f.env.Config)
	if err != nil {
		t.Fatal(err)
	}
	plan := &execPlan{ns: "ns1", pod: "box-pod", opts: corev1.PodExecOptions{Container: sandlotv1.ContainerName,
		Command: []string{"sh", "-c", "echo hi"}, Stdin: true, Stdout: true, TTY: true}}
	u := plan.url(core.RESTClient())
	if u.Path != "/api/v1/namespaces/ns1/pods/box-pod/exec" {
		t.Errorf("path %s", u.Path)
	}
	q := u.Query()
	if q.Get("container") != "sandbox" || !slices.Equal(q["command"], []string{"sh", "-c", "echo hi"}) ||
		q.Get("stdin") != "true" || q.Get("stdout") != "true" || q.Get("tty") != "true" || q.Has("stderr") {
		t.Errorf("query %v", q)
	}
}

// TestExecReachesThePod runs exec against the real API server: with no
// kubelet behind it, the server's answer (it cannot reach the pod's
// node) must come back as the command's error. A real exec runs in the
// cluster e2e.
func TestExecReachesThePod(t *testing.T) {
	f, ns := setup(t)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "box-pod", Namespace: ns}, Spec: corev1.PodSpec{
		NodeName:   "ghost-node",
		Containers: []corev1.Container{{Name: sandlotv1.ContainerName, Image: "registry.example/python:3.12"}}}}
	if err := f.c.Create(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	sbx := f.sandbox(t, ns, "box", nil)
	f.running(t, sbx, "ghost-node", "10.0.0.2")
	res := f.fails(t, ns, []string{"exec", "box", "--", "echo", "hi"}, "exec in pod box-pod of the sandbox")
	t.Logf("exec without a kubelet: %v", res.err)
	wantError(t, res.err, "ghost-node")
}

func TestCompletionScripts(t *testing.T) {
	for shell, want := range map[string]string{
		"bash": "__start_kubectl-sandlot",
		"zsh":  "#compdef kubectl-sandlot",
		"fish": "complete -c kubectl-sandlot",
	} {
		out, err := runLocal("completion", shell)
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("completion %s: %v, output without %q:\n%.300s", shell, err, want, out)
		}
	}
}

// completions runs cobra's __complete and returns the offered words and
// the directive line.
func completions(t *testing.T, f *fixture, ns string, args ...string) ([]string, string) {
	t.Helper()
	res := f.ok(t, ns, append([]string{"__complete"}, args...)...)
	lines := strings.Split(strings.TrimSpace(res.out), "\n")
	return lines[:len(lines)-1], lines[len(lines)-1]
}

func TestDynamicCompletion(t *testing.T) {
	f, ns := setup(t)
	f.template(t, ns, "python")
	f.template(t, ns, "node")
	f.running(t, f.sandbox(t, ns, "alpha", nil), "node-1", "10.0.0.1")
	f.sandbox(t, ns, "apex", nil)
	f.sandbox(t, ns, "sleepy", func(s *sandlotv1.Sandbox) { s.Spec.Paused = true })
	snapshotOf(t, f, ns, "alpha-s1", "alpha")
	snapshotOf(t, f, ns, "sleepy-s1", "sleepy")

	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"pause", ""}, []string{"alpha", "apex"}},
		{[]string{"resume", ""}, []string{"sleepy"}},
		{[]string{"snapshot", "al"}, []string{"alpha"}},
		{[]string{"pause", "alpha", ""}, nil},
		{[]string{"delete", "alpha", ""}, []string{"apex", "sleepy"}},
		{[]string{"rollback", "alpha", "--to", ""}, []string{"alpha-s1"}},
		{[]string{"clone", ""}, []string{"alpha-s1", "sleepy-s1", "alpha", "apex", "sleepy"}},
		{[]string{"create", "--template", ""}, []string{"node", "python"}},
		{[]string{"exec", ""}, []string{"alpha", "apex", "sleepy"}},
		{[]string{"ls", ""}, []string{"sandboxes", "snapshots", "paused", "templates"}},
		{[]string{"logs", "a"}, []string{"alpha", "apex"}},
		{[]string{"logs", "alpha", ""}, nil},
		{[]string{"cp", "alpha:"}, nil},
		{[]string{"version", ""}, nil},
	}
	for _, c := range cases {
		got, directive := completions(t, f, ns, c.args...)
		if !slices.Equal(got, c.want) || directive != ":4" {
			t.Errorf("complete %q: got %q %s, want %q :4 (no file completion)", c.args, got, directive, c.want)
		}
	}
	// cp offers SANDBOX: of the sandboxes with a pod, without a space
	// after it (:2); with none matching, the shell's files (no :4).
	for _, args := range [][]string{{"cp", ""}, {"cp", "./x", ""}} {
		if got, directive := completions(t, f, ns, args...); !slices.Equal(got, []string{"alpha:"}) || directive != ":2" {
			t.Errorf("complete %q: got %q %s, want [alpha:] :2", args, got, directive)
		}
	}
	if got, directive := completions(t, f, ns, "cp", "data"); len(got) != 0 || directive != ":2" {
		t.Errorf("complete cp data: got %q %s, want nothing and :2 (files)", got, directive)
	}
	if got, directive := completions(t, f, ns, "cp", "alpha:/tmp/x", ""); len(got) != 0 || directive != ":0" {
		t.Errorf("complete cp alpha:/tmp/x: got %q %s, want nothing and :0 (local files)", got, directive)
	}
	got, _ := completions(t, f, ns, "ls", "-n", ns[:4])
	if !slices.Contains(got, ns) {
		t.Errorf("-n completion %q lacks %s", got, ns)
	}
}
