package crienv

import (
	"fmt"
	"os"
	"sync"
)

// T is what the harness needs of a test; *testing.T has it, and Run gives
// benchmark commands one.
type T interface {
	Helper()
	Cleanup(func())
	Errorf(format string, args ...any)
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Failed() bool
	Logf(format string, args ...any)
	Name() string
}

// Run runs fn with a T outside `go test` (a benchmark command): Fatal
// ends fn, cleanups run last-first, and the first failure is returned.
func Run(name string, fn func(T)) (err error) {
	r := &runner{name: name}
	defer func() {
		if p := recover(); p != nil && p != errFatal {
			r.Errorf("panic: %v", p)
		}
		for i := len(r.cleanups) - 1; i >= 0; i-- {
			r.cleanups[i]()
		}
		err = r.err()
	}()
	fn(r)
	return nil
}

var errFatal = fmt.Errorf("fatal")

type runner struct {
	name     string
	mu       sync.Mutex
	cleanups []func()
	errs     []string
}

func (r *runner) Helper()          {}
func (r *runner) Name() string     { return r.name }
func (r *runner) Cleanup(f func()) { r.mu.Lock(); r.cleanups = append(r.cleanups, f); r.mu.Unlock() }
func (r *runner) Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s: %s\n", r.name, fmt.Sprintf(format, args...))
}

func (r *runner) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *runner) Fatal(args ...any) { r.Errorf("%s", fmt.Sprint(args...)); panic(errFatal) }
func (r *runner) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	panic(errFatal)
}

func (r *runner) Failed() bool { r.mu.Lock(); defer r.mu.Unlock(); return len(r.errs) > 0 }

func (r *runner) err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %v", r.name, r.errs)
}
