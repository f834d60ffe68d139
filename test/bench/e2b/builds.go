package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/test/bench/sbxbench"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
	vmtest "github.com/sandlot-dev/sandlot/test/vm"
)

// buildSteps are the benchmark build's three RUN steps: small, so the rows
// measure the build's machinery (the builder's cold boot, the agent
// running steps through the guest, the snapshot) more than the commands.
var buildSteps = []string{"echo one > /tmp/one", "mkdir -p /opt/app && echo two > /opt/app/two", "sha256sum /bin/sh > /tmp/three"}

// Rows of the template build benchmark.
const (
	rowBuild  = "template build: image + 3 RUN steps, to ready"
	rowCached = "template rebuild, same steps (cache hit)"
	rowStep3  = "template rebuild, step 3 changed (steps 1-2 cached)"
	rowByHand = "by hand: image base (cold boot, snapshot) + sandbox + 3 commands"
)

// builds times n template builds through the API (POST /v3/templates,
// POST /v2/templates/{id}/builds/{buildID}, status polled every 200 ms as
// the SDK does), a rebuild of each with the same steps, and the same work
// by hand: a Template of the image without steps (its base is the image
// booted cold, probed and snapshotted) plus the three commands run in a
// sandbox of it through envd.
func (b *bench) builds(n int) {
	var built, cached, step3, byHand []float64
	for i := range n {
		name := fmt.Sprintf("bench-built-%d", i)
		d, err := b.buildTemplate(name, buildSteps)
		if err != nil {
			b.t.Fatalf("build %s: %v", name, err)
		}
		built = append(built, ms(d))
		if d, err = b.buildTemplate(name, buildSteps); err != nil {
			b.t.Fatalf("rebuild %s: %v", name, err)
		}
		cached = append(cached, ms(d))
		changed := append(buildSteps[:2:2], "sha256sum /bin/ls > /tmp/three")
		if d, err = b.buildTemplate(name, changed); err != nil {
			b.t.Fatalf("rebuild %s with step 3 changed: %v", name, err)
		}
		step3 = append(step3, ms(d))
		if d, err = b.byHand(fmt.Sprintf("bench-plain-%d", i)); err != nil {
			b.t.Fatalf("by hand: %v", err)
		}
		byHand = append(byHand, ms(d))
		b.settle()
	}
	b.table.Add(rowBuild, "ms", built, "each a new template: builder boot, steps, snapshot")
	b.table.Add(rowCached, "ms", cached, "a new build ID, the same steps: the base is reused")
	b.table.Add(rowStep3, "ms", step3, "the builder restores step 2's checkpoint and runs step 3")
	b.table.Add(rowByHand, "ms", byHand, "a Template of the image without steps, then a sandbox, then the commands through envd")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// buildTemplate builds name from the default image with the RUN steps as
// the SDK does, and returns the time until its status is ready.
func (b *bench) buildTemplate(name string, runs []string) (time.Duration, error) {
	env, err := vmtest.LoadEnv()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	var req struct {
		TemplateID, BuildID string
	}
	if err := b.callJSON(http.MethodPost, "/v3/templates", fmt.Sprintf(`{"name":%q,"cpuCount":1,"memoryMB":256}`, name), http.StatusAccepted, &req); err != nil {
		return 0, err
	}
	steps := make([]map[string]any, 0, len(runs))
	for _, s := range runs {
		steps = append(steps, map[string]any{"type": "RUN", "args": []string{s, "root"}})
	}
	body, _ := json.Marshal(map[string]any{"fromImage": env.ImageRef, "steps": steps})
	if err := b.callJSON(http.MethodPost, "/v2/templates/"+req.TemplateID+"/builds/"+req.BuildID, string(body), http.StatusAccepted, nil); err != nil {
		return 0, err
	}
	for time.Since(start) < waitTimeout {
		var st struct {
			Status string
			Reason struct{ Message string }
		}
		if err := b.callJSON(http.MethodGet, "/templates/"+req.TemplateID+"/builds/"+req.BuildID+"/status", "", http.StatusOK, &st); err != nil {
			return 0, err
		}
		switch st.Status {
		case "ready":
			return time.Since(start), nil
		case "error":
			return 0, fmt.Errorf("build %s failed: %s", req.BuildID, st.Reason.Message)
		}
		time.Sleep(200 * time.Millisecond) // the SDK's poll interval
	}
	return 0, fmt.Errorf("build %s not ready within %v", req.BuildID, waitTimeout)
}

// byHand is the same work without a build: the image's base, then the
// commands in a sandbox of it.
func (b *bench) byHand(name string) (time.Duration, error) {
	env, err := vmtest.LoadEnv()
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	start := time.Now()
	tpl := &sandlotv1.Template{ObjectMeta: sbxbench.Meta(name),
		Spec: sandlotv1.TemplateSpec{Image: env.ImageRef, Resources: sandlotv1.Resources{VCPU: 1, MemoryMiB: 256}}}
	if err := b.k.Create(ctx, tpl); err != nil {
		return 0, err
	}
	if err := sbxtest.WaitBases(ctx, b.k, client.ObjectKeyFromObject(tpl), 1, waitTimeout); err != nil {
		return 0, err
	}
	var created struct{ SandboxID string }
	if err := b.callJSON(http.MethodPost, "/v2/sandboxes", fmt.Sprintf(`{"templateID":%q,"timeout":600}`, name), http.StatusCreated, &created); err != nil {
		return 0, err
	}
	sbx, err := b.sandboxByID(ctx, created.SandboxID)
	if err != nil {
		return 0, err
	}
	if _, err := sbxtest.Exec(ctx, b.k, sbx, strings.Join(buildSteps, " && ")); err != nil {
		return 0, err
	}
	d := time.Since(start)
	_, err = b.kill(created.SandboxID)
	return d, err
}

func (b *bench) sandboxByID(ctx context.Context, id string) (*sandlotv1.Sandbox, error) {
	list := &sandlotv1.SandboxList{}
	if err := b.k.List(ctx, list, client.InNamespace("default")); err != nil {
		return nil, err
	}
	for i := range list.Items {
		if list.Items[i].Status.SandboxID == id {
			return &list.Items[i], nil
		}
	}
	return nil, fmt.Errorf("no sandbox %s", id)
}

// callJSON calls the API, checks the status and decodes the body into out.
func (b *bench) callJSON(method, path, body string, want int, out any) error {
	code, data, err := b.call(method, path, body)
	if err != nil {
		return err
	}
	if code != want {
		return fmt.Errorf("%s %s: %d %s", method, path, code, data)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}
