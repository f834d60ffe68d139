// Command kubectl-sandlot is the kubectl plugin of sandlot: put it on
// PATH and run `kubectl sandlot`. Linked (or copied) as
// kubectl_complete-sandlot it answers kubectl's shell completion of
// `kubectl sandlot <TAB>`.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/go-logr/logr"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sandlot-dev/sandlot/kubectl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	var exit *kubectl.ExitError
	switch {
	case errors.As(err, &exit):
		os.Exit(exit.Code)
	case err != nil:
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	// controller-runtime's client logs nothing a user needs; without a
	// logger it warns on stderr that none was set.
	ctrllog.SetLogger(logr.Discard())
	cmd := kubectl.NewRootCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	args := os.Args[1:]
	// kubectl completes plugins by running kubectl_complete-<plugin>
	// with the words typed so far.
	if strings.HasPrefix(filepath.Base(os.Args[0]), "kubectl_complete-") {
		args = append([]string{"__complete"}, args...)
	}
	cmd.SetArgs(args)
	return cmd.ExecuteContext(ctx)
}
