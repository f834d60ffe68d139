package kubectl

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

type createOptions struct {
	template string
	lifetime time.Duration
	metadata []string
	env      []string
	changeFlags
}

func (r *root) createCmd() *cobra.Command {
	o := &createOptions{}
	o.hint = " (the sandbox's lifetime is --lifetime)"
	cmd := &cobra.Command{
		Use:   "create --template TEMPLATE [NAME]",
		Short: "Create a sandbox from a template",
		Long: "create makes a Sandbox of --template and, with --wait, waits until it is usable.\n\n" +
			"--lifetime is how long the sandbox lives (its spec.timeoutSeconds; the template's when\n" +
			"omitted). --timeout bounds --wait, as in every other command: it used to be the lifetime,\n" +
			"which is --lifetime now (and --wait-timeout, the old bound, is --timeout).",
		Example: "  kubectl sandlot create --template python my-sandbox --wait\n" +
			"  kubectl sandlot create --template python --lifetime 10m --metadata owner=me --env DEBUG=1\n" +
			"  kubectl sandlot create --template python --wait --timeout 2m -o name",
		Args:              args(0, 1, "at most one NAME (generated when omitted)"),
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE:              func(cmd *cobra.Command, args []string) error { return r.create(cmd, o, args) },
	}
	cmd.Flags().StringVar(&o.template, "template", "", "Template to start from (required)")
	cmd.Flags().Var(lifetimeValue{&o.lifetime}, "lifetime",
		"the sandbox's lifetime: a duration (10m, 1h30m) or seconds (600); default: the template's (this was --timeout)")
	cmd.Flags().StringArrayVar(&o.metadata, "metadata", nil, "metadata key=value (repeatable)")
	cmd.Flags().StringArrayVar(&o.env, "env", nil, "environment variable NAME=value (repeatable)")
	o.changeFlags.add(cmd, "the sandbox is usable (Running, VMReady)")
	cmd.Flags().DurationVar(&o.timeout, "wait-timeout", o.timeout, "how long --wait waits")
	_ = cmd.Flags().MarkDeprecated("wait-timeout", "use --timeout (the lifetime is --lifetime)")
	_ = cmd.RegisterFlagCompletionFunc("template", r.completeTemplates)
	return cmd
}

func (r *root) create(cmd *cobra.Command, o *createOptions, args []string) error {
	sbx, err := o.sandbox(cmd, args)
	if err != nil {
		return err
	}
	return r.begin(cmd, o, func(ctx context.Context, s *session) error {
		if err := s.get(ctx, "template", o.template, &sandlotv1.Template{}); err != nil {
			return err
		}
		sbx.Namespace = s.ns
		if err := s.c.Create(ctx, sbx); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("sandbox %s already exists in namespace %s", sbx.Name, s.ns)
			}
			return fmt.Errorf("create the sandbox: %w", err)
		}
		fmt.Fprintf(s.out, "sandbox/%s created (id %s)\n", sbx.Name, sandboxID(sbx))
		if o.wait {
			usable, err := s.waitUsable(ctx, &o.waitFlags, map[string]int64{sbx.Name: sbx.Generation})
			if err != nil {
				return err
			}
			sbx = usable[0]
		}
		return o.out.emit(s.objects, sbx)
	})
}

// lifetimeValue is --lifetime: a duration, or whole seconds.
type lifetimeValue struct{ d *time.Duration }

func (v lifetimeValue) String() string {
	if v.d == nil || *v.d == 0 {
		return ""
	}
	return v.d.String()
}

func (v lifetimeValue) Set(s string) error {
	if n, err := strconv.ParseInt(s, 10, 32); err == nil {
		*v.d = time.Duration(n) * time.Second
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration (10m, 1h30m) or seconds (600)")
	}
	*v.d = d
	return nil
}

func (v lifetimeValue) Type() string { return "duration" }

// sandbox is the Sandbox the flags describe (its namespace set later).
func (o *createOptions) sandbox(cmd *cobra.Command, args []string) (*sandlotv1.Sandbox, error) {
	if o.template == "" {
		return nil, errUsage(cmd, "--template is required: the Template the sandbox starts from")
	}
	sbx := &sandlotv1.Sandbox{Spec: sandlotv1.SandboxSpec{Source: sandlotv1.SandboxSource{Template: o.template}}}
	sbx.Finalizers = []string{sandlotv1.FinalizerSandboxVM} // see newClone
	if len(args) == 1 {
		sbx.Name = args[0]
	} else {
		sbx.GenerateName = o.template + "-"
	}
	if cmd.Flag("lifetime").Changed {
		secs, err := timeoutSeconds(o.lifetime)
		if err != nil {
			return nil, errUsage(cmd, "--lifetime: %v", err)
		}
		sbx.Spec.TimeoutSeconds = ptr.To(secs)
	}
	var err error
	if sbx.Spec.Metadata, err = parseMetadata(o.metadata); err != nil {
		return nil, errUsage(cmd, "%v", err)
	}
	if sbx.Spec.Env, err = parseEnv(o.env); err != nil {
		return nil, errUsage(cmd, "%v", err)
	}
	return sbx, nil
}

// maxTimeout is the Sandbox CRD's bound on spec.timeoutSeconds (30 days).
const maxTimeout = 30 * 24 * time.Hour

// timeoutSeconds rounds a lifetime up to whole seconds.
func timeoutSeconds(d time.Duration) (int32, error) {
	if d <= 0 || d > maxTimeout {
		return 0, fmt.Errorf("%v is outside 1s..%v", d, maxTimeout)
	}
	return int32(math.Ceil(d.Seconds())), nil
}

func parseMetadata(pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, kv := range pairs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--metadata %q: expected key=value", kv)
		}
		m[k] = v
	}
	return m, nil
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// parseEnv keeps the order of first mention; a repeated name takes its
// last value (the spec's env is a list keyed by name).
func parseEnv(pairs []string) ([]sandlotv1.EnvVar, error) {
	var env []sandlotv1.EnvVar
	at := map[string]int{}
	for _, kv := range pairs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !envName.MatchString(k) {
			return nil, fmt.Errorf("--env %q: expected NAME=value, NAME of letters, digits and '_' not starting with a digit", kv)
		}
		if i, seen := at[k]; seen {
			env[i].Value = v
			continue
		}
		at[k] = len(env)
		env = append(env, sandlotv1.EnvVar{Name: k, Value: v})
	}
	return env, nil
}

// newClone is a Sandbox restoring snapshot, named after it; a clone of
// a sandbox (parent, nil for none) keeps its metadata and network rules.
func newClone(ns, snapshot string, parent *sandlotv1.Sandbox) *sandlotv1.Sandbox {
	sbx := &sandlotv1.Sandbox{
		// The controller's finalizer comes with the create, as sandlot-api
		// sends it: the controller's update adding it would be one more
		// API write on the start's path.
		ObjectMeta: metav1.ObjectMeta{GenerateName: snapshot + "-", Namespace: ns,
			Finalizers: []string{sandlotv1.FinalizerSandboxVM}},
		Spec: sandlotv1.SandboxSpec{Source: sandlotv1.SandboxSource{Snapshot: snapshot}},
	}
	if parent != nil {
		sbx.Spec.Metadata, sbx.Spec.Network = parent.Spec.Metadata, parent.Spec.Network.DeepCopy()
	}
	return sbx
}
