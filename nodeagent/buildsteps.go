package nodeagent

import (
	"context"
	"fmt"
	"maps"
	"path"
	"strings"
	"time"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/guest/control"
)

// guestRunner is what a build needs of a VM (guestExec, or a fake).
type guestRunner interface {
	run(ctx context.Context, req execRequest, out func([]byte)) (int, error)
	write(ctx context.Context, path string, data []byte) error
}

// stepFailure is a step that failed, with what the user needs to see.
type stepFailure struct {
	Step    int // 1-based; len(steps)+1 is the start/ready command
	Message string
}

func (f *stepFailure) Error() string { return fmt.Sprintf("step %d: %s", f.Step, f.Message) }

// stepRunner runs a build's steps in order, carrying ENV, WORKDIR and
// USER from one step to the next, as a Dockerfile does.
type stepRunner struct {
	g     guestRunner
	files func(ctx context.Context, hash string) ([]byte, error)
	// checkpoint snapshots the guest after a step that changed it (the
	// step cache); nil: none taken.
	checkpoint func(ctx context.Context, n int) error
	log        *buildLog
	env        map[string]string
	user       string // "" = the guest's default user
	cwd        string // "" = the user's home
	// readyPoll is how often the ready command is tried.
	readyPoll time.Duration
}

// outputTail bounds the output a failed step's message carries.
const outputTail = 4 << 10

// runAll runs the steps after the first from (which the guest's
// checkpoint holds: only their ENV, WORKDIR and USER are taken up again),
// then the start command until the ready command passes. An error is a
// *stepFailure or the VM being unreachable.
func (s *stepRunner) runAll(ctx context.Context, b *sandlotv1.TemplateBuild, from int) error {
	for i, st := range b.Steps {
		n := i + 1
		line := fmt.Sprintf("[%d/%d] %s %s", n, len(b.Steps), st.Type, strings.Join(st.Args, " "))
		if n <= from {
			s.log.line(n, "info", "CACHED %s", line)
			s.replay(st)
			continue
		}
		s.log.line(n, "info", "%s", line)
		if err := s.step(ctx, n, st); err != nil {
			return err
		}
		if s.checkpoint != nil && st.Type.ChangesGuest() && !baseFollows(b, n) {
			began := time.Now()
			if err := s.checkpoint(ctx, n); err != nil {
				s.log.line(n, "warn", "no checkpoint after step %d (a later build runs it again): %v", n, err)
			} else {
				s.log.line(n, "info", "checkpoint after step %d in %d ms", n, time.Since(began).Milliseconds())
			}
		}
	}
	return s.start(ctx, len(b.Steps)+1, b.StartCmd, b.ReadyCmd)
}

// baseFollows: step n is the last to change the guest and no start or
// ready command runs after it — the base snapshot taken next holds the
// same guest, so a checkpoint there would only cost its time.
func baseFollows(b *sandlotv1.TemplateBuild, n int) bool {
	if b.StartCmd != "" || b.ReadyCmd != "" {
		return false
	}
	for _, st := range b.Steps[n:] {
		if st.Type.ChangesGuest() {
			return false
		}
	}
	return true
}

// replay takes up what a step done in an earlier build set for the steps
// after it: its ENV, WORKDIR or USER.
func (s *stepRunner) replay(st sandlotv1.BuildStep) {
	switch st.Type {
	case sandlotv1.StepEnv:
		for i := 0; i+1 < len(st.Args); i += 2 {
			s.env[st.Args[i]] = st.Args[i+1]
		}
	case sandlotv1.StepWorkdir:
		if len(st.Args) > 0 {
			s.cwd = s.resolve(st.Args[0])
		}
	case sandlotv1.StepUser:
		if len(st.Args) > 0 {
			s.user = st.Args[0]
		}
	}
}

func (s *stepRunner) step(ctx context.Context, n int, st sandlotv1.BuildStep) error {
	arg := func(i int) string {
		if i < len(st.Args) {
			return st.Args[i]
		}
		return ""
	}
	switch st.Type {
	case sandlotv1.StepRun:
		user := s.user
		if u := arg(1); u != "" {
			user = u
		}
		return s.exec(ctx, n, execRequest{Cmd: arg(0), User: user, Cwd: s.cwd, Env: s.env})
	case sandlotv1.StepCopy:
		return s.copy(ctx, n, st.FilesHash, arg(0), arg(1), arg(2), arg(3))
	case sandlotv1.StepEnv:
		s.replay(st)
		return nil
	case sandlotv1.StepWorkdir:
		dir := s.resolve(arg(0))
		if err := s.exec(ctx, n, execRequest{Cmd: `mkdir -p "$D" && if [ -n "$U" ]; then chown "$U" "$D"; fi`, User: "root",
			Env: map[string]string{"D": dir, "U": s.user}}); err != nil {
			return err
		}
		s.cwd = dir
		return nil
	case sandlotv1.StepUser:
		if err := s.exec(ctx, n, execRequest{Cmd: `id -u "$U" >/dev/null`, User: "root", Env: map[string]string{"U": arg(0)}}); err != nil {
			return &stepFailure{Step: n, Message: fmt.Sprintf("USER %s: no such user in the image", arg(0))}
		}
		s.user = arg(0)
		return nil
	}
	return &stepFailure{Step: n, Message: fmt.Sprintf("unknown step type %q", st.Type)}
}

// resolve makes a WORKDIR or COPY destination absolute against the
// current working directory (the user's home when none was set).
func (s *stepRunner) resolve(p string) string {
	if path.IsAbs(p) || s.cwd == "" {
		return p // relative to the home the command starts in
	}
	return path.Join(s.cwd, p)
}

// exec runs one command of step n, its output into the log; a non-zero
// exit is a stepFailure with the output's tail.
func (s *stepRunner) exec(ctx context.Context, n int, req execRequest) error {
	var tail []byte
	code, err := s.g.run(ctx, req, func(b []byte) {
		s.log.output(n, b)
		tail = append(tail, b...)
		if len(tail) > 2*outputTail {
			tail = tail[len(tail)-outputTail:]
		}
	})
	s.log.endStep(n)
	if err != nil {
		return fmt.Errorf("step %d: %w", n, err)
	}
	if code != 0 {
		if len(tail) > outputTail {
			tail = tail[len(tail)-outputTail:]
		}
		return &stepFailure{Step: n, Message: fmt.Sprintf("%q exited with status %d: %s", req.Cmd, code, strings.TrimSpace(string(tail)))}
	}
	return nil
}

// copyScript unpacks a COPY step's files and copies src (relative to
// them, globs allowed) to dest the way a Dockerfile's COPY does: a
// directory's contents into dest; a file into dest when dest is a
// directory or ends in "/", else as dest. Paths come in the environment,
// never in the script's text.
const copyScript = `set -e
case "$DEST" in /*) ;; *) DEST="$PWD/$DEST" ;; esac
t=$(mktemp -d /tmp/.sandlot-copy.XXXXXX)
trap 'rm -rf "$t" "$TAR"' EXIT
tar -xf "$TAR" -C "$t"
cd "$t"
set -- $SRC
[ -e "$1" ] || { echo "COPY: $SRC matches none of the uploaded files" >&2; exit 1; }
case "$DEST" in */) mkdir -p "$DEST" ;; esac
for s in "$@"; do
  if [ -d "$s" ]; then mkdir -p "$DEST"; cp -a "$s/." "$DEST/"; target="$DEST"
  elif [ -d "$DEST" ]; then cp -a "$s" "$DEST/"; target="${DEST%/}/$(basename "$s")"
  else mkdir -p "$(dirname "$DEST")"; cp -a "$s" "$DEST"; target="$DEST"; fi
  if [ -n "$OWNER" ]; then chown -R "$OWNER" "$target"; fi
  if [ -n "$MODE" ]; then chmod "$MODE" "$target"; fi
done`

// copy runs a COPY step: the uploaded tar into the guest, then unpacked
// and copied there as root.
func (s *stepRunner) copy(ctx context.Context, n int, hash, src, dest, owner, mode string) error {
	data, err := s.files(ctx, hash)
	if err != nil {
		return &stepFailure{Step: n, Message: fmt.Sprintf("COPY %s: %v", src, err)}
	}
	tar := "/tmp/.sandlot-files-" + hash + ".tar"
	if err := s.g.write(ctx, tar, data); err != nil {
		return fmt.Errorf("step %d: %w", n, err)
	}
	if owner == "" && s.user != "" && s.user != "root" {
		owner = s.user
	}
	env := map[string]string{"TAR": tar, "SRC": src, "DEST": dest, "OWNER": owner, "MODE": mode}
	return s.exec(ctx, n, execRequest{Cmd: copyScript, User: "root", Cwd: s.cwd, Env: env})
}

// start runs the start command in the background (it keeps running in the
// base, and in every sandbox restored from it) and polls the ready command
// until it passes; its output goes to the log until then.
func (s *stepRunner) start(ctx context.Context, n int, startCmd, readyCmd string) error {
	if startCmd == "" && readyCmd == "" {
		return nil
	}
	if startCmd != "" {
		s.log.line(n, "info", "start command: %s", startCmd)
		sctx, stop := context.WithCancel(ctx)
		defer stop() // the process outlives its stream
		exited := make(chan error, 1)
		env := maps.Clone(s.env)
		env["SANDLOT_START"] = startCmd
		go func() {
			code, err := s.g.run(sctx, execRequest{Cmd: startScript, User: s.user, Cwd: s.cwd, Env: env},
				func(b []byte) { s.log.output(n, b) })
			if err == nil && code != 0 {
				err = fmt.Errorf("the start command exited with status %d before the ready command passed", code)
			}
			exited <- err // nil: it exited 0 (a daemon that forked), so the ready command decides
		}()
		return s.waitReady(ctx, n, readyCmd, exited)
	}
	return s.waitReady(ctx, n, readyCmd, nil)
}

// startScript runs the start command (in SANDLOT_START, never in the
// script's text) with its output into the guest's log FIFO — the
// container's log, so `kubectl logs` and the logs API show it in the
// builder and in every sandbox restored from the base — and to the build
// log while the build follows it; it exits with the command's status.
const startScript = `c=$SANDLOT_START; unset SANDLOT_START
log=/dev/null; [ -p ` + control.LogFIFO + ` ] && log=` + control.LogFIFO + `
st=$(mktemp /tmp/.sandlot-start.XXXXXX)
{ sh -c "$c"; echo $? >"$st"; } 2>&1 | tee -a "$log"
s=$(cat "$st"); rm -f "$st"; exit "${s:-1}"`

// waitReady polls the ready command until it exits 0; the start command
// ending first fails the build.
func (s *stepRunner) waitReady(ctx context.Context, n int, readyCmd string, exited <-chan error) error {
	if readyCmd == "" {
		readyCmd = "true"
	}
	s.log.line(n, "info", "ready command: %s", readyCmd)
	for {
		code, err := s.g.run(ctx, execRequest{Cmd: readyCmd, User: s.user, Cwd: s.cwd, Env: s.env}, func([]byte) {})
		if err != nil {
			return fmt.Errorf("ready command: %w", err)
		}
		if code == 0 {
			s.log.line(n, "info", "the ready command passed")
			return nil
		}
		select {
		case err := <-exited:
			s.log.endStep(n)
			if err != nil && ctx.Err() == nil {
				return &stepFailure{Step: n, Message: err.Error()}
			}
			exited = nil
		case <-ctx.Done():
			return &stepFailure{Step: n, Message: "the ready command did not pass in time: " + context.Cause(ctx).Error()}
		case <-time.After(s.readyPoll):
		}
	}
}
