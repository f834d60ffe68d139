package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// listAll pages through GET /v2/sandboxes at full size, timing each
// page, then lists one user's sandboxes by metadata.
func (r *run) listAll(ctx context.Context, rep *Report) error {
	token := ""
	for {
		began := time.Now()
		n, next, err := r.e.listPage(ctx, url.Values{"limit": {"100"}, "nextToken": {token}})
		if err != nil {
			return err
		}
		rep.ListPages = append(rep.ListPages, time.Since(began))
		rep.Listed += n
		if token = next; token == "" {
			break
		}
	}
	began := time.Now()
	for token := ""; ; {
		_, next, err := r.e.listPage(ctx, url.Values{"limit": {"100"}, "nextToken": {token}, "metadata": {"user=u7"}})
		if err != nil {
			return err
		}
		if token = next; token == "" {
			break
		}
	}
	rep.FilterList = time.Since(began)
	return nil
}

// listPage is one page of GET /v2/sandboxes: its size and the next token.
func (e *Env) listPage(ctx context.Context, q url.Values) (int, string, error) {
	if q.Get("nextToken") == "" {
		q.Del("nextToken")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.APIURL+"/v2/sandboxes?"+q.Encode(), nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("X-API-Key", e.APIKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("list sandboxes: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, "", fmt.Errorf("list sandboxes: %s: %s", resp.Status, body)
	}
	var page []json.RawMessage
	if err := json.Unmarshal(body, &page); err != nil {
		return 0, "", fmt.Errorf("list sandboxes: %w", err)
	}
	return len(page), resp.Header.Get("X-Next-Token"), nil
}

// finish reads the final counters and checks the end state: every live
// sandbox Running or Paused, no pod shared by two sandboxes.
func (r *run) finish(ctx context.Context, rep *Report) error {
	var err error
	if rep.Final, err = r.e.snapshotCosts(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	rep.Live = len(r.live)
	r.mu.Unlock()
	rep.SharedPods = r.rec.sharedPods()
	rep.Paused, rep.Snapshots = int(rep.paused.Load()), int(rep.snapshots.Load())
	if rep.Floor, err = r.e.floor(ctx, 50); err != nil {
		return err
	}
	return nil
}

// floor times n ConfigMap creates until a watch sees each: one API write
// and one watch event, the least any hop of the controller pays.
func (e *Env) floor(ctx context.Context, n int) ([]time.Duration, error) {
	wc, err := client.NewWithWatch(e.Config, client.Options{Scheme: e.Scheme})
	if err != nil {
		return nil, err
	}
	w, err := wc.Watch(ctx, &corev1.ConfigMapList{}, client.InNamespace(Namespace))
	if err != nil {
		return nil, fmt.Errorf("watch configmaps: %w", err)
	}
	defer w.Stop()
	var out []time.Duration
	for i := range n {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("floor-%d", i), Namespace: Namespace}}
		began := time.Now()
		if err := e.Admin.Create(ctx, cm); err != nil {
			return nil, err
		}
		if err := seen(ctx, w, cm.Name); err != nil {
			return nil, err
		}
		out = append(out, time.Since(began))
	}
	return out, nil
}

func seen(ctx context.Context, w watch.Interface, name string) error {
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return fmt.Errorf("the watch ended")
			}
			if cm, isCM := ev.Object.(*corev1.ConfigMap); isCM && ev.Type == watch.Added && cm.Name == name {
				return nil
			}
		case <-timeout:
			return fmt.Errorf("configmap %s not seen within 30s", name)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
