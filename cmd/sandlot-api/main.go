// Command sandlot-api serves the E2B-compatible REST API over sandlot's
// CRDs and proxies the SDKs' sandbox traffic to sandbox pods.
//
//	sandlot-api [flags]            serve
//	sandlot-api issue-key [flags]  add a new API key to the keys Secret and print it
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/sandlot-dev/sandlot/e2b"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if len(os.Args) > 1 && os.Args[1] == "issue-key" {
		err = issueKey(ctx, os.Args[2:])
	} else {
		err = serve(ctx, os.Args[1:])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandlot-api:", err)
		os.Exit(1)
	}
}

func serve(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sandlot-api", flag.ExitOnError)
	var cfg e2b.Config
	listen := fs.String("listen", ":3000", "address of the API and the sandbox proxy (plain HTTP)")
	tlsListen := fs.String("tls-listen", "", "address of the same over TLS (with --tls-cert and --tls-key): the SDK's domain mode speaks https")
	tlsCert := fs.String("tls-cert", "", "certificate for *.<domain> (PEM)")
	tlsKey := fs.String("tls-key", "", "its key (PEM)")
	metricsListen := fs.String("metrics-listen", "", "address of /metrics (Prometheus); none when empty")
	fs.StringVar(&cfg.Namespace, "namespace", "default", "namespace of the sandboxes, snapshots and templates served")
	fs.StringVar(&cfg.DefaultTemplate, "default-template", "default", "Template the SDKs' default IDs (base, code-interpreter-v1) resolve to")
	fs.StringVar(&cfg.Domain, "domain", "", "sandbox domain returned to SDKs: port p of a sandbox is <p>-<sandboxID>.<domain> (may carry :port)")
	fs.StringVar(&cfg.KeysSecret, "keys-secret", "sandlot-api-keys", "Secret whose values are the API keys")
	fs.DurationVar(&cfg.CreateTimeout, "create-timeout", 2*time.Minute, "bound of a create, resume, fork or rollback")
	fs.DurationVar(&cfg.PauseTimeout, "pause-timeout", 2*time.Minute, "bound of a pause")
	fs.DurationVar(&cfg.SnapshotTimeout, "snapshot-timeout", 5*time.Minute, "bound of a snapshot")
	fs.Int64Var(&cfg.MaxBodyBytes, "max-body-bytes", 1<<20, "largest API request body (proxied bodies are not bounded)")
	_ = fs.Parse(args)
	if (*tlsListen != "") != (*tlsCert != "" && *tlsKey != "") {
		return errors.New("--tls-listen needs --tls-cert and --tls-key, and they need it")
	}
	cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))

	rest, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	kube, err := e2b.NewKube(ctx, rest, cfg.Namespace)
	if err != nil {
		return err
	}
	handler := e2b.New(cfg, kube)
	errs := make(chan error, 3)
	servers := []*http.Server{{Addr: *listen, Handler: handler, ReadHeaderTimeout: 10 * time.Second}}
	go func() { errs <- servers[0].ListenAndServe() }()
	if *tlsListen != "" {
		srv := &http.Server{Addr: *tlsListen, Handler: handler, ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, srv)
		go func() { errs <- srv.ListenAndServeTLS(*tlsCert, *tlsKey) }()
	}
	if *metricsListen != "" {
		srv := &http.Server{Addr: *metricsListen, Handler: e2b.MetricsHandler(), ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, srv)
		go func() { errs <- srv.ListenAndServe() }()
	}
	cfg.Log.Info("serving the E2B API", "listen", *listen, "tls", *tlsListen, "namespace", cfg.Namespace, "domain", cfg.Domain)
	select {
	case err := <-errs:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(shutdown)
	}
	return nil
}

// issueKey adds a new key to the keys Secret (creating it) and prints it.
func issueKey(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sandlot-api issue-key", flag.ExitOnError)
	ns := fs.String("namespace", "default", "namespace of the keys Secret")
	secretName := fs.String("keys-secret", "sandlot-api-keys", "the keys Secret")
	name := fs.String("name", "", "name of the key in the Secret (default: key-<unix time>)")
	_ = fs.Parse(args)
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
	if *name == "" {
		*name = fmt.Sprintf("key-%d", time.Now().UnixNano())
	}
	secrets := cs.CoreV1().Secrets(*ns)
	secret, err := secrets.Get(ctx, *secretName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		secret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: *secretName, Namespace: *ns},
			StringData: map[string]string{*name: key}}
		_, err = secrets.Create(ctx, secret, metav1.CreateOptions{})
	case err == nil:
		if secret.Data == nil {
			secret.Data = map[string][]byte{}
		}
		if _, taken := secret.Data[*name]; taken {
			return fmt.Errorf("secret %s/%s has a key named %s already", *ns, *secretName, *name)
		}
		secret.Data[*name] = []byte(key)
		_, err = secrets.Update(ctx, secret, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("store the key in secret %s/%s: %w", *ns, *secretName, err)
	}
	fmt.Println(key)
	return nil
}
