package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/sandlot-dev/sandlot/e2b"
)

// issueKey adds a new key to the keys Secret (creating it) and prints it:
// the Secret keeps only its hash, so this is the one time it is shown.
func issueKey(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sandlot-api issue-key", flag.ExitOnError)
	ns := fs.String("namespace", "default", "namespace of the keys Secret")
	secretName := fs.String("keys-secret", "sandlot-api-keys", "the keys Secret")
	name := fs.String("name", "", "name of the key in the Secret (default: key-<unix time>)")
	team := fs.String("team", "", "the key's team (a namespace the API serves with --teams): kept in the Secret "+
		"<keys-secret>-<team> labelled "+e2b.LabelTeam+"=<team>; default: --namespace's own team")
	_ = fs.Parse(args)
	labels := map[string]string{}
	if *team != "" && *team != *ns {
		*secretName += "-" + *team
		labels[e2b.LabelTeam] = *team
	}
	rest, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(rest)
	if err != nil {
		return err
	}
	key, err := e2b.NewAPIKey()
	if err != nil {
		return err
	}
	hash, err := e2b.HashAPIKey(key)
	if err != nil {
		return err
	}
	if *name == "" {
		*name = fmt.Sprintf("key-%d", time.Now().UnixNano())
	}
	secrets := cs.CoreV1().Secrets(*ns)
	secret, err := secrets.Get(ctx, *secretName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		secret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: *secretName, Namespace: *ns, Labels: labels},
			StringData: map[string]string{*name: hash}}
		_, err = secrets.Create(ctx, secret, metav1.CreateOptions{})
	case err == nil:
		if secret.Data == nil {
			secret.Data = map[string][]byte{}
		}
		if secret.Labels[e2b.LabelTeam] != labels[e2b.LabelTeam] {
			return fmt.Errorf("secret %s/%s holds the keys of team %q, not %q", *ns, *secretName, secret.Labels[e2b.LabelTeam], *team)
		}
		if _, taken := secret.Data[*name]; taken {
			return fmt.Errorf("secret %s/%s has a key named %s already", *ns, *secretName, *name)
		}
		secret.Data[*name] = []byte(hash)
		_, err = secrets.Update(ctx, secret, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("store the key in secret %s/%s: %w", *ns, *secretName, err)
	}
	fmt.Println(key)
	return nil
}

// hashKey prints the value a keys Secret stores for the key read from in
// (one line): for keys Secrets an operator fills from elsewhere.
func hashKey(in io.Reader, out io.Writer) error {
	line, err := bufio.NewReader(io.LimitReader(in, 4096)).ReadString('\n')
	if err != nil && err != io.EOF {
		return fmt.Errorf("read the key: %w", err)
	}
	key := strings.TrimSpace(line)
	if key == "" {
		return fmt.Errorf("hash-key: give the key on stdin, one line")
	}
	hash, err := e2b.HashAPIKey(key)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, hash)
	return err
}
