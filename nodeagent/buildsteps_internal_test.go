package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// fakeGuest records what a build asks of a VM; answer scripts each
// command's output and exit code. The real guest is test/e2b's
// build.test.mjs (the SDK's Template().build() on a cluster).
type fakeGuest struct {
	mu     sync.Mutex
	reqs   []execRequest
	writes map[string]string
	answer func(execRequest) (string, int)
}

func (g *fakeGuest) run(ctx context.Context, req execRequest, out func([]byte)) (int, error) {
	g.mu.Lock()
	g.reqs = append(g.reqs, req)
	g.mu.Unlock()
	o, code := g.answer(req)
	out([]byte(o))
	if code < 0 { // a start command: runs until its stream goes
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return code, nil
}

func (g *fakeGuest) write(_ context.Context, path string, data []byte) error {
	g.writes[path] = string(data)
	return nil
}

func newSteps(g *fakeGuest) *stepRunner {
	return &stepRunner{g: g, log: &buildLog{partial: map[int]string{}}, env: map[string]string{"BASE": "1"}, readyPoll: time.Millisecond,
		files: func(_ context.Context, hash string) ([]byte, error) { return []byte("tar of " + hash), nil }}
}

func TestBuildStepsCarryEnvWorkdirUser(t *testing.T) {
	tries := 0
	g := &fakeGuest{writes: map[string]string{}, answer: func(r execRequest) (string, int) {
		switch {
		case r.Env["SANDLOT_START"] == "serve":
			return "listening\n", -1
		case r.Cmd == "ready?":
			if tries++; tries < 3 {
				return "", 1
			}
		}
		return "", 0
	}}
	b := &sandlotv1.TemplateBuild{StartCmd: "serve", ReadyCmd: "ready?", Steps: []sandlotv1.BuildStep{
		{Type: sandlotv1.StepEnv, Args: []string{"GREETING", "hi"}},
		{Type: sandlotv1.StepWorkdir, Args: []string{"/app"}},
		{Type: sandlotv1.StepRun, Args: []string{"make"}},
		{Type: sandlotv1.StepUser, Args: []string{"user"}},
		{Type: sandlotv1.StepWorkdir, Args: []string{"sub"}},
		{Type: sandlotv1.StepCopy, Args: []string{"src/", "dest", "", "0755"}, FilesHash: "abcd1234abcd1234"},
		{Type: sandlotv1.StepRun, Args: []string{"whoami", "root"}},
	}}
	if err := newSteps(g).runAll(context.Background(), b, 0); err != nil {
		t.Fatal(err)
	}
	byCmd := map[string]execRequest{}
	for _, r := range g.reqs {
		byCmd[r.Cmd] = r
		if c := r.Env["SANDLOT_START"]; c != "" {
			byCmd[c] = r
		}
	}
	if r := byCmd["make"]; r.Cwd != "/app" || r.User != "" || r.Env["GREETING"] != "hi" || r.Env["BASE"] != "1" {
		t.Errorf("RUN make = %+v, want cwd /app, the default user, GREETING and BASE", r)
	}
	if r := byCmd["whoami"]; r.User != "root" || r.Cwd != "/app/sub" {
		t.Errorf("RUN whoami = %+v, want root (its own user) in /app/sub", r)
	}
	if r := byCmd[copyScript]; r.User != "root" || r.Env["OWNER"] != "user" || r.Env["MODE"] != "0755" || r.Env["SRC"] != "src/" ||
		r.Env["TAR"] != "/tmp/.sandlot-files-abcd1234abcd1234.tar" || g.writes[r.Env["TAR"]] != "tar of abcd1234abcd1234" {
		t.Errorf("COPY = %+v, writes %v", r, g.writes)
	}
	if r := byCmd["serve"]; r.User != "user" || r.Cwd != "/app/sub" {
		t.Errorf("start command = %+v, want the last USER and WORKDIR", r)
	}
	if tries != 3 {
		t.Errorf("the ready command ran %d times, want until it passed (3)", tries)
	}
}

// A build from a checkpoint after step 3 runs only steps 4 on, with the
// ENV, WORKDIR and USER of steps 1-3 taken up; every later step that
// changes the guest is checkpointed, ENV and USER are not.
func TestBuildFromCheckpoint(t *testing.T) {
	g := &fakeGuest{writes: map[string]string{}, answer: func(execRequest) (string, int) { return "", 0 }}
	b := &sandlotv1.TemplateBuild{Steps: []sandlotv1.BuildStep{
		{Type: sandlotv1.StepEnv, Args: []string{"GREETING", "hi"}},
		{Type: sandlotv1.StepWorkdir, Args: []string{"/app"}},
		{Type: sandlotv1.StepUser, Args: []string{"user"}},
		{Type: sandlotv1.StepRun, Args: []string{"changed"}},
		{Type: sandlotv1.StepEnv, Args: []string{"LATER", "1"}},
		{Type: sandlotv1.StepWorkdir, Args: []string{"sub"}},
		{Type: sandlotv1.StepRun, Args: []string{"last"}},
	}}
	steps := newSteps(g)
	var checkpoints []int
	steps.checkpoint = func(_ context.Context, n int) error {
		checkpoints = append(checkpoints, n)
		if n == 6 {
			return errors.New("snapshot failed") // the build goes on without it
		}
		return nil
	}
	if err := steps.runAll(context.Background(), b, 3); err != nil {
		t.Fatal(err)
	}
	var cmds []string
	for _, r := range g.reqs {
		cmds = append(cmds, r.Cmd)
	}
	if len(g.reqs) != 3 || g.reqs[0].Cmd != "changed" || g.reqs[2].Cmd != "last" {
		t.Fatalf("ran %q, want changed, the WORKDIR's mkdir, last", cmds)
	}
	if r := g.reqs[0]; r.User != "user" || r.Cwd != "/app" || r.Env["GREETING"] != "hi" {
		t.Errorf("RUN changed = %+v, want the cached steps' user, workdir and env", r)
	}
	if r := g.reqs[2]; r.Cwd != "/app/sub" || r.Env["LATER"] != "1" {
		t.Errorf("RUN last = %+v", r)
	}
	if fmt.Sprint(checkpoints) != "[4 6]" {
		t.Errorf("checkpoints after steps %v, want [4 6] (none after 7: the base follows it)", checkpoints)
	}
	log := steps.log.buf.String()
	for _, want := range []string{"CACHED [1/7] ENV GREETING hi", "CACHED [3/7] USER user", "no checkpoint after step 6"} {
		if !strings.Contains(log, want) {
			t.Errorf("the build log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "CACHED [4/7]") {
		t.Errorf("step 4 logged as cached:\n%s", log)
	}
}

func TestBuildStepFailureCarriesItsOutput(t *testing.T) {
	g := &fakeGuest{writes: map[string]string{}, answer: func(r execRequest) (string, int) {
		if r.Cmd == "false" {
			return strings.Repeat("noise\n", 2000) + "the real reason\n", 3
		}
		return "", 0
	}}
	b := &sandlotv1.TemplateBuild{Steps: []sandlotv1.BuildStep{{Type: sandlotv1.StepRun, Args: []string{"true"}},
		{Type: sandlotv1.StepRun, Args: []string{"false"}}, {Type: sandlotv1.StepRun, Args: []string{"never"}}}}
	err := newSteps(g).runAll(context.Background(), b, 0)
	f := asFailure(err)
	if f == nil || f.Step != 2 || !strings.Contains(f.Message, "status 3") || !strings.HasSuffix(f.Message, "the real reason") ||
		len(f.Message) > outputTail+100 || !strings.HasPrefix(err.Error(), "step 2: ") {
		t.Fatalf("err = %v", err)
	}
	for _, r := range g.reqs {
		if r.Cmd == "never" {
			t.Fatal("a step after the failed one ran")
		}
	}
}

func TestBuildStartCommandExitingFails(t *testing.T) {
	g := &fakeGuest{writes: map[string]string{}, answer: func(r execRequest) (string, int) {
		if r.Env["SANDLOT_START"] == "serve" {
			return "crash\n", 1
		}
		return "", 1 // never ready
	}}
	err := newSteps(g).runAll(context.Background(), &sandlotv1.TemplateBuild{StartCmd: "serve", ReadyCmd: "ready?"}, 0)
	if f := asFailure(err); f == nil || f.Step != 1 || !strings.Contains(f.Message, "exited with status 1 before the ready command passed") {
		t.Fatalf("err = %v", err)
	}
}

// TestCopyScript runs the COPY script in a real shell on real tar files:
// a directory's contents, a file into a directory, a file renamed, a glob,
// and a source that is not there.
func TestCopyScript(t *testing.T) {
	for _, tool := range []string{"sh", "tar", "mktemp", "cp"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: the COPY script runs with the image's shell tools", tool)
		}
	}
	ctxDir := t.TempDir()
	for name, body := range map[string]string{"dir/a.txt": "a", "dir/sub/b.txt": "b", "one.txt": "1", "x.py": "x", "y.py": "y"} {
		p := filepath.Join(ctxDir, name)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte(body), 0o644))
	}
	root := t.TempDir()
	cases := []struct{ src, dest, want string }{
		{"dir", root + "/d1", "d1/a.txt d1/sub/b.txt"},
		{"one.txt", root + "/d2/", "d2/one.txt"},
		{"one.txt", root + "/renamed.txt", "renamed.txt"},
		{"*.py", root + "/py/", "py/x.py py/y.py"},
	}
	for i, tc := range cases {
		tar := filepath.Join(t.TempDir(), fmt.Sprintf("%d.tar", i))
		must(t, exec.Command("tar", "-czf", tar, "-C", ctxDir, ".").Run())
		cmd := exec.Command("sh", "-c", copyScript)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "TAR="+tar, "SRC="+tc.src, "DEST="+tc.dest, "OWNER=", "MODE=")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("COPY %s %s: %v\n%s", tc.src, tc.dest, err, out)
		}
		for _, f := range strings.Fields(tc.want) {
			if _, err := os.Stat(filepath.Join(root, f)); err != nil {
				t.Errorf("COPY %s %s: %v", tc.src, tc.dest, err)
			}
		}
		if _, err := os.Stat(tar); !os.IsNotExist(err) {
			t.Errorf("the uploaded tar %s is left behind", tar)
		}
	}
	cmd := exec.Command("sh", "-c", copyScript)
	tar := filepath.Join(t.TempDir(), "m.tar")
	must(t, exec.Command("tar", "-cf", tar, "-C", ctxDir, ".").Run())
	cmd.Env = append(os.Environ(), "TAR="+tar, "SRC=missing.txt", "DEST="+root+"/m")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "matches none of the uploaded files") {
		t.Fatalf("COPY of a missing source: %v %s", err, out)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestStartScript runs the start command wrapper in a real shell: the
// command's output comes through and its exit status is the script's.
func TestStartScript(t *testing.T) {
	cmd := exec.Command("sh", "-c", startScript)
	cmd.Env = append(os.Environ(), `SANDLOT_START=echo "up $SANDLOT_START"; echo err >&2; exit 3`)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 || string(out) != "up \nerr\n" {
		t.Fatalf("start script: %v, output %q", err, out)
	}
}

// asFailure is err as a step failure, or nil.
func asFailure(err error) *stepFailure {
	var f *stepFailure
	if errors.As(err, &f) {
		return f
	}
	return nil
}
