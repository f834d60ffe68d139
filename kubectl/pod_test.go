package kubectl

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// slotPod is the pod a sandbox took from a start slot: not named after
// the sandbox (see podOf).
const slotPod = "python-slot-7kq2x"

// inSlot makes a running sandbox whose pod is slotPod, and a fake
// kubelet for that pod; it returns the fixture going through it.
func inSlot(t *testing.T, f *fixture, ns, name string, pod *fakePod) *fixture {
	t.Helper()
	sbx := f.sandbox(t, ns, name, nil)
	f.running(t, sbx, "node-1", "10.0.0.5")
	setStatus(t, f, sbx, func(s *sandlotv1.Sandbox) { s.Status.PodName = slotPod })
	pod.ns, pod.name = ns, slotPod
	return f.via(pod.serve(t, f))
}

func TestLogsFollowTheSandboxsPod(t *testing.T) {
	f, ns := setup(t)
	pod := &fakePod{log: []string{"guest: booted", "app: listening on 8000", "app: GET / 200"}}
	fp := inSlot(t, f, ns, "box", pod)

	if out := fp.ok(t, ns, "logs", "box").out; out != "guest: booted\napp: listening on 8000\napp: GET / 200\n" {
		t.Errorf("logs: %q", out)
	}
	if out := fp.ok(t, ns, "logs", "box", "-f", "--tail", "1", "--timestamps", "--since", "90s").out; out != "app: GET / 200\n" {
		t.Errorf("logs --tail 1: %q", out)
	}
	q := pod.last(t).URL.Query()
	for k, want := range map[string]string{"container": "sandbox", "follow": "true", "tailLines": "1", "timestamps": "true", "sinceSeconds": "90"} {
		if got := q.Get(k); got != want {
			t.Errorf("log request %s=%q, want %q (query %v)", k, got, want, q)
		}
	}

	f.sandbox(t, ns, "sleepy", func(s *sandlotv1.Sandbox) { s.Spec.Paused = true })
	fp.fails(t, ns, []string{"logs", "sleepy"}, "sandbox sleepy has no pod to read the log of", "it is paused: resume it first")
	fp.fails(t, ns, []string{"logs", "nope"}, "sandbox nope not found in namespace "+ns)
}

func TestExecFollowsTheSandboxsPod(t *testing.T) {
	f, ns := setup(t)
	fp := inSlot(t, f, ns, "box", &fakePod{root: t.TempDir()})

	if res := fp.ok(t, ns, "exec", "box", "--", "echo", "hello"); res.out != "hello\n" {
		t.Errorf("exec: stdout %q stderr %q", res.out, res.errOut)
	}
	res := fp.run(t, ns, "exec", "box", "--", "sh", "-c", "echo oops >&2; exit 3")
	var exit *ExitError
	if !errors.As(res.err, &exit) || exit.Code != 3 || res.errOut != "oops\n" {
		t.Errorf("exec exit 3: err %v, stderr %q", res.err, res.errOut)
	}
}

// TestCpInAndOut copies through the fake kubelet, which runs the tar the
// command asks for on this host with the "VM"'s / in root.
func TestCpInAndOut(t *testing.T) {
	f, ns := setup(t)
	root, local := t.TempDir(), t.TempDir()
	fp := inSlot(t, f, ns, "box", &fakePod{root: root})
	mkdirs(t, filepath.Join(root, "tmp"), filepath.Join(local, "tree", "sub"), filepath.Join(local, "existing"))
	writeFiles(t, map[string]string{
		filepath.Join(local, "a.txt"):              "alpha",
		filepath.Join(local, "tree", "top"):        "top",
		filepath.Join(local, "tree", "sub", "low"): "low",
	})
	if err := os.Chmod(filepath.Join(local, "tree", "top"), 0o755); err != nil {
		t.Fatal(err)
	}

	in := func(src, dst string) { fp.ok(t, ns, "cp", filepath.Join(local, src), "box:"+dst) }
	in("a.txt", "/tmp/in.txt")
	in("tree", "/tmp/")     // into the directory, by the trailing /
	in("tree", "/tmp/copy") // as /tmp/copy
	in("a.txt", "/tmp")     // into /tmp: a directory (test -d)
	wantFiles(t, root, map[string]string{"tmp/in.txt": "alpha", "tmp/tree/top": "top", "tmp/tree/sub/low": "low",
		"tmp/copy/sub/low": "low", "tmp/a.txt": "alpha"})

	out := func(src, dst string) result { return fp.ok(t, ns, "cp", "box:"+src, filepath.Join(local, dst)) }
	out("/tmp/in.txt", "back.txt")
	out("/tmp/tree", "tree-back")
	out("/tmp/tree", "existing") // into the existing directory
	wantFiles(t, local, map[string]string{"back.txt": "alpha", "tree-back/top": "top", "tree-back/sub/low": "low",
		"existing/tree/sub/low": "low"})
	if fi, err := os.Stat(filepath.Join(local, "tree-back", "top")); err != nil || fi.Mode().Perm()&0o100 == 0 {
		t.Errorf("the executable bit did not come back: %v %v", fi.Mode(), err)
	}

	// Links from the sandbox stay there.
	if err := os.Symlink("/etc/passwd", filepath.Join(root, "tmp", "tree", "passwd")); err != nil {
		t.Fatal(err)
	}
	res := out("/tmp/tree", "linked")
	contains(t, "stderr", res.errOut, "skipping tree/passwd: not a regular file or directory")
	if _, err := os.Lstat(filepath.Join(local, "linked", "passwd")); !os.IsNotExist(err) {
		t.Errorf("the sandbox's symlink was copied out: %v", err)
	}

	fp.fails(t, ns, []string{"cp", "box:/tmp/nope", local}, "copy /tmp/nope out of the sandbox: tar exited with code 2", "nope")
	fp.fails(t, ns, []string{"cp", filepath.Join(local, "missing"), "box:/tmp/x"}, "missing", "no such file")
	f.sandbox(t, ns, "sleepy", func(s *sandlotv1.Sandbox) { s.Spec.Paused = true })
	fp.fails(t, ns, []string{"cp", "sleepy:/tmp/x", local}, "sandbox sleepy has no pod to copy files through")
}

func mkdirs(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func writeFiles(t *testing.T, files map[string]string) {
	t.Helper()
	for p, content := range files {
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// wantFiles checks the files under dir hold what want says.
func wantFiles(t *testing.T, dir string, want map[string]string) {
	t.Helper()
	for p, content := range want {
		got, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil || string(got) != content {
			t.Errorf("%s: %q (%v), want %q", p, got, err, content)
		}
	}
}
