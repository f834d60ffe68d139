package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandlot-dev/sandlot/e2b"
)

// issueToken adds an access token of a team (E2B's Bearer credential,
// which manages the team's API keys and tokens through the API) and
// prints it: only its hash is kept, so this is the one time it is shown.
func issueToken(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sandlot-api issue-token", flag.ExitOnError)
	ns := fs.String("namespace", "default", "the API's namespace (where its Secrets are)")
	keysSecret := fs.String("keys-secret", "sandlot-api-keys", "the keys Secret (tokens go to <keys-secret>-access-tokens-<team>)")
	team := fs.String("team", "", "the token's team (default: --namespace's own team)")
	name := fs.String("name", "", "the token's name (default: token-<unix time>)")
	_ = fs.Parse(args)
	if *team == "" {
		*team = *ns
	}
	if *name == "" {
		*name = fmt.Sprintf("token-%d", time.Now().Unix())
	}
	rest, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(rest, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	token, err := e2b.IssueAccessToken(ctx, c, *ns, *keysSecret, *team, *name)
	if err != nil {
		return fmt.Errorf("issue an access token of team %s: %w", *team, err)
	}
	fmt.Println(token)
	return nil
}
