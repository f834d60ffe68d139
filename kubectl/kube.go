package kubectl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// session is one command's connection: a client that can watch, the
// namespace the command works in, and where its lines, its progress and
// the objects -o prints go.
type session struct {
	c       client.WithWatch
	cfg     *rest.Config
	ns      string
	out     io.Writer // the command's lines: stdout, or stderr with -o
	errOut  io.Writer
	objects io.Writer // what -o prints: stdout
}

// session connects with the kubeconfig flags (--kubeconfig, --context,
// -n, ...).
func (r *root) session() (*session, error) {
	cfg, err := r.flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	// clone --count creates many objects at once: client-go's default of
	// 5 requests/s would make that slow for no benefit.
	cfg.QPS, cfg.Burst = 50, 100
	ns, _, err := r.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, fmt.Errorf("read the namespace from the kubeconfig: %w", err)
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("connect to the API server: %w", err)
	}
	return &session{c: c, cfg: cfg, ns: ns, out: r.streams.Out, errOut: r.streams.ErrOut, objects: r.streams.Out}, nil
}

// core is the typed client of the core API group (pods' exec and log
// subresources).
func (s *session) core() (corev1client.CoreV1Interface, error) {
	core, err := corev1client.NewForConfig(s.cfg)
	if err != nil {
		return nil, fmt.Errorf("build the core API client: %w", err)
	}
	return core, nil
}

// begin is the start every command that can --wait shares: it checks the
// flags before connecting (a usage error needs no cluster), connects, and
// runs the rest within the wait's bound. With -o the command's lines go
// to stderr: stdout holds the objects alone.
func (r *root) begin(cmd *cobra.Command, w waiter, run func(ctx context.Context, s *session) error) error {
	if err := w.check(cmd); err != nil {
		return err
	}
	s, err := r.session()
	if err != nil {
		return err
	}
	if p, ok := w.(printing); ok && p.output().objects() {
		s.out = s.errOut
	}
	ctx, cancel := w.context(cmd.Context())
	defer cancel()
	return run(ctx, s)
}

// sandboxRun is what a command does to the one sandbox it is given.
type sandboxRun func(ctx context.Context, s *session, sbx *sandlotv1.Sandbox) error

// onSandbox is begin for a command on one sandbox: run gets it read, and
// never one that failed or is being deleted (no command acts on those).
func (r *root) onSandbox(cmd *cobra.Command, w waiter, name string, run sandboxRun) error {
	return r.begin(cmd, w, func(ctx context.Context, s *session) error {
		sbx, err := s.sandbox(ctx, name)
		if err != nil {
			return err
		}
		if err := sandboxFailed(sbx); err != nil {
			return err
		}
		return run(ctx, s, sbx)
	})
}

// get reads the named object of kind (a word for messages) from the
// session's namespace; a missing one is said plainly.
func (s *session) get(ctx context.Context, kind, name string, obj client.Object) error {
	err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: name}, obj)
	if apierrors.IsNotFound(err) {
		return &notFoundError{kind, name, s.ns}
	}
	if err != nil {
		return fmt.Errorf("get %s %s: %w", kind, name, err)
	}
	return nil
}

// notFoundError is an object missing from the namespace.
type notFoundError struct{ kind, name, ns string }

func (e *notFoundError) Error() string {
	return fmt.Sprintf("%s %s not found in namespace %s", e.kind, e.name, e.ns)
}

func isNotFound(err error) bool {
	var nf *notFoundError
	return errors.As(err, &nf)
}

func (s *session) sandbox(ctx context.Context, name string) (*sandlotv1.Sandbox, error) {
	sbx := &sandlotv1.Sandbox{}
	return sbx, s.get(ctx, "sandbox", name, sbx)
}

func (s *session) snapshot(ctx context.Context, name string) (*sandlotv1.Snapshot, error) {
	snap := &sandlotv1.Snapshot{}
	return snap, s.get(ctx, "snapshot", name, snap)
}

// patchSpec merge-patches spec fields of the sandbox, guarded by its UID
// (a sandbox deleted and made again under the same name is not touched);
// sbx then holds the result, with the generation the change made.
func (s *session) patchSpec(ctx context.Context, sbx *sandlotv1.Sandbox, spec map[string]any) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": sbx.UID}, "spec": spec})
	if err != nil {
		return fmt.Errorf("encode the patch: %w", err)
	}
	err = s.c.Patch(ctx, sbx, client.RawPatch(types.MergePatchType, patch))
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return fmt.Errorf("sandbox %s not found in namespace %s (deleted meanwhile)", sbx.Name, s.ns)
	}
	if err != nil {
		return fmt.Errorf("update sandbox %s: %w", sbx.Name, err)
	}
	return nil
}
