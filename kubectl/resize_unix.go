//go:build unix

package kubectl

import (
	"os"
	"os/signal"
	"syscall"
)

// notifyResize delivers the terminal's resize signal (SIGWINCH) to ch.
func notifyResize(ch chan<- os.Signal) { signal.Notify(ch, syscall.SIGWINCH) }

func stopResize(ch chan<- os.Signal) { signal.Stop(ch) }
