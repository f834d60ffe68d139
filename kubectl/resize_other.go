//go:build !unix

package kubectl

import "os"

// notifyResize: no resize signal here; the size is sent once.
func notifyResize(chan<- os.Signal) {}

func stopResize(chan<- os.Signal) {}
