package vm

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// These tests play a guest that escaped into its jailed QEMU: code running
// as the VM's uid, free to change anything in the VM's own directories.
// It plants symlinks, hard links and FIFOs where root later reads, copies,
// chowns, creates or removes files, all pointing at a root-owned canary
// outside those directories; root's code must refuse or step over them,
// and the canary must keep its content, owner and mode.

// attackerUID is the escaped QEMU's uid (unused on the test machines).
const attackerUID = 200000

const canaryContent = "root's secret: the canary\n"

type scene struct {
	t      *testing.T
	base   string
	canary string // root's file, outside every directory the attacker owns
	want   canaryState
}

type canaryState struct {
	content   string
	uid, mode uint32
}

// newScene makes the test's tree: the attacker can reach (not list) its
// base, as the jail's binds let QEMU reach its own directories.
func newScene(t *testing.T) *scene {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("not root: these tests plant links as another uid and check that root does not follow them")
	}
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	s := &scene{t: t, base: base, canary: filepath.Join(base, "canary")}
	if err := os.WriteFile(s.canary, []byte(canaryContent), 0o640); err != nil {
		t.Fatal(err)
	}
	s.want = s.canaryNow()
	return s
}

func (s *scene) canaryNow() canaryState {
	s.t.Helper()
	b, err := os.ReadFile(s.canary)
	if err != nil {
		s.t.Fatalf("canary: %v", err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(s.canary, &st); err != nil {
		s.t.Fatalf("canary: %v", err)
	}
	return canaryState{content: string(b), uid: st.Uid, mode: st.Mode}
}

// checkCanary fails the test if root wrote, chowned or chmodded the canary.
func (s *scene) checkCanary() {
	s.t.Helper()
	if got := s.canaryNow(); got != s.want {
		s.t.Fatalf("the canary changed: %+v, was %+v", got, s.want)
	}
}

// vmDir makes a directory of the VM's, handed to its uid.
func (s *scene) vmDir(name string) string {
	s.t.Helper()
	d := filepath.Join(s.base, name)
	if err := os.Mkdir(d, 0o700); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Chown(d, attackerUID, attackerUID); err != nil {
		s.t.Fatal(err)
	}
	return d
}

// attack runs a shell script as the VM's uid in dir.
func (s *scene) attack(dir, script string) error {
	cmd := exec.Command("sh", "-ec", script)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "CANARY=" + s.canary}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: attackerUID, Gid: attackerUID}}
	if out, err := cmd.CombinedOutput(); err != nil {
		return errors.New(strings.TrimSpace(string(out)) + ": " + err.Error())
	}
	return nil
}

func (s *scene) mustAttack(dir, script string) {
	s.t.Helper()
	if err := s.attack(dir, script); err != nil {
		s.t.Fatalf("as uid %d in %s: %s: %v", attackerUID, dir, script, err)
	}
}

// plant puts a link of kind ("symlink", "hard link", "named pipe",
// "root's file") to the canary at name in dir. A hard link to a file of
// root's is what fs.protected_hardlinks=1 forbids the attacker: then root
// plants it, as the attacker could on a node with the sysctl off.
func (s *scene) plant(dir, name, kind string) {
	s.t.Helper()
	p := filepath.Join(dir, name)
	switch kind {
	case "symlink":
		s.mustAttack(dir, `ln -sfn "$CANARY" `+name)
	case "hard link":
		if err := s.attack(dir, `rm -f `+name+`; ln "$CANARY" `+name); err != nil {
			s.t.Logf("the attacker could not hard-link the canary (%v): planted by root instead", err)
			_ = os.Remove(p)
			if err := os.Link(s.canary, p); err != nil {
				s.t.Fatal(err)
			}
		}
	case "named pipe":
		s.mustAttack(dir, `rm -f `+name+`; mkfifo `+name)
	case "root's file": // one link, someone else's: a hard link whose count raced
		_ = os.Remove(p)
		if err := os.WriteFile(p, []byte(canaryContent), 0o600); err != nil {
			s.t.Fatal(err)
		}
	default:
		s.t.Fatalf("plant %q?", kind)
	}
}

// refusedAs fails the test (going on: the canary is checked next) unless
// err is a Dir's refusal of what.
func refusedAs(t *testing.T, err error, what string) {
	t.Helper()
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "refusing "+what) {
		t.Errorf("want a refusal of a %s, got: %v", what, err)
		return
	}
	t.Logf("refused: %v", err)
}

// noCanaryIn fails the test if a file under dir holds the canary's content.
func noCanaryIn(t *testing.T, dir string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if b, _ := os.ReadFile(p); strings.Contains(string(b), canaryContent) {
			t.Errorf("%s holds the canary's content", p)
		}
		return nil
	})
}
