package process

import (
	"fmt"
	"os"
	"os/exec"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/sandlot-dev/sandlot/guest/envdpb/processpb"
)

// Terminal size when the request gives none (or zero).
const (
	defaultCols = 80
	defaultRows = 24
)

// startPipes starts cmd with stdout and stderr on pipes, and stdin on a
// pipe when the client asked to write to it (else /dev/null). The process
// leads its own process group so signals reach its children too.
func startPipes(cmd *exec.Cmd, withStdin bool) (*proc, error) {
	p := newProc(cmd)
	var childEnds []*os.File
	// The child has its own copies once started; ours would keep the
	// pipes open and the readers from ever seeing EOF.
	defer func() { closeFiles(childEnds) }()
	for _, k := range []outputKind{stdout, stderr} {
		r, w, err := os.Pipe()
		if err != nil {
			p.closeFiles()
			return nil, fmt.Errorf("output pipe: %w", err)
		}
		p.outputs = append(p.outputs, output{f: r, kind: k})
		childEnds = append(childEnds, w)
	}
	cmd.Stdout, cmd.Stderr = childEnds[0], childEnds[1]
	if withStdin {
		r, w, err := os.Pipe()
		if err != nil {
			p.closeFiles()
			return nil, fmt.Errorf("stdin pipe: %w", err)
		}
		cmd.Stdin, p.stdin, p.hadStdin = r, w, true
		childEnds = append(childEnds, r)
	}
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		p.closeFiles()
		return nil, err
	}
	p.pid = uint32(cmd.Process.Pid)
	return p, nil
}

// startPTY starts cmd on a new pseudo-terminal of the requested size, in
// its own session (hence its own process group) with the terminal as its
// controlling tty; input and output both go through the master.
func startPTY(cmd *exec.Cmd, size *processpb.PTY_Size) (*proc, error) {
	master, tty, err := openPTY()
	if err != nil {
		return nil, err
	}
	defer tty.Close() // the child has its own copy once started
	p := newProc(cmd)
	p.tty = master
	p.outputs = []output{{f: master, kind: ptyOut}}
	if err := setSize(master, size); err != nil {
		p.closeFiles()
		return nil, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr.Setsid, cmd.SysProcAttr.Setctty = true, true
	if err := cmd.Start(); err != nil {
		p.closeFiles()
		return nil, err
	}
	p.pid = uint32(cmd.Process.Pid)
	return p, nil
}

// openPTY opens a pty pair and returns a master the Go poller manages:
// creack/pty's ioctls (via File.Fd) leave its master in blocking mode,
// where read deadlines do not work and a read that never returns (a
// grandchild holding the terminal) would pin a thread for ever.
func openPTY() (master, tty *os.File, err error) {
	m, t, err := pty.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("open pty: %w", err)
	}
	defer m.Close()
	fd, err := unix.FcntlInt(m.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err == nil {
		err = unix.SetNonblock(fd, true)
	}
	if err != nil {
		t.Close()
		return nil, nil, fmt.Errorf("pty master: %w", err)
	}
	return os.NewFile(uintptr(fd), m.Name()), t, nil
}

// setSize sets the terminal size through the poller-safe raw conn (Fd
// would switch the master back to blocking mode).
func setSize(master *os.File, size *processpb.PTY_Size) error {
	ws := &unix.Winsize{Col: defaultCols, Row: defaultRows}
	if c := size.GetCols(); c > 0 {
		ws.Col = uint16(min(c, 0xffff))
	}
	if r := size.GetRows(); r > 0 {
		ws.Row = uint16(min(r, 0xffff))
	}
	rc, err := master.SyscallConn()
	if err != nil {
		return fmt.Errorf("resize pty: %w", err)
	}
	var ioErr error
	if err := rc.Control(func(fd uintptr) { ioErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, ws) }); err != nil {
		return fmt.Errorf("resize pty: %w", err)
	}
	if ioErr != nil {
		return fmt.Errorf("resize pty: %w", ioErr)
	}
	return nil
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		if f != nil {
			_ = f.Close()
		}
	}
}
