package server

import (
	"errors"
	"syscall"

	"github.com/sandlot-dev/sandlot/guest/control"
)

// stdinRequest queues a writeStdin or closeStdin; reply is called once
// the write is done. Called in frame order by the connection's reader.
func (h *Handler) stdinRequest(f control.Frame, reply func(error)) {
	var p control.WriteStdinParams
	if e := control.DecodeParams(f.Params, &p); e != nil {
		reply(e)
		return
	}
	pr, err := h.lookup(p.PID)
	if err != nil {
		reply(err)
		return
	}
	op := stdinOp{reply: reply}
	if f.Method == control.MethodCloseStdin {
		op.close = true
	} else {
		op.data = p.Data
	}
	pr.enqueueStdin(op)
}

func (pr *process) enqueueStdin(op stdinOp) {
	pr.stdinMu.Lock()
	defer pr.stdinMu.Unlock()
	if pr.stdinBytes+len(op.data) > maxStdinQueued {
		if op.reply != nil {
			op.reply(control.Errorf(control.CodeBusy, "stdin of %d: %d bytes queued", pr.pid, pr.stdinBytes))
		}
		return
	}
	pr.stdinBytes += len(op.data)
	pr.stdinQ = append(pr.stdinQ, op)
	if !pr.stdinRunning {
		pr.stdinRunning = true
		go pr.runStdin()
	}
}

func (pr *process) runStdin() {
	for {
		pr.stdinMu.Lock()
		if len(pr.stdinQ) == 0 {
			pr.stdinRunning = false
			pr.stdinMu.Unlock()
			return
		}
		op := pr.stdinQ[0]
		pr.stdinQ = pr.stdinQ[1:]
		closed := pr.stdinClosed
		if op.close {
			pr.stdinClosed = true
		}
		pr.stdinMu.Unlock()

		err := pr.doStdin(op, closed)
		pr.stdinMu.Lock()
		pr.stdinBytes -= len(op.data)
		pr.stdinMu.Unlock()
		if op.reply != nil {
			op.reply(err)
		}
	}
}

func (pr *process) doStdin(op stdinOp, closed bool) error {
	switch {
	case op.close && closed:
		return nil
	case closed:
		return control.Errorf(control.CodeFailed, "stdin of %d is closed", pr.pid)
	case op.close && pr.terminal:
		_, err := pr.stdin.Write([]byte{4}) // ^D: end of input on a terminal
		return wrapStdin(pr.pid, err)
	case op.close:
		return wrapStdin(pr.pid, pr.stdin.Close())
	}
	_, err := pr.stdin.Write(op.data)
	return wrapStdin(pr.pid, err)
}

func wrapStdin(pid int, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, syscall.EPIPE) {
		return control.Errorf(control.CodeFailed, "stdin of %d: process no longer reads it", pid)
	}
	return control.Errorf(control.CodeFailed, "stdin of %d: %v", pid, err)
}
