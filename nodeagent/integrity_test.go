package nodeagent_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandlot-dev/sandlot/api/node/stageapi"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/nodeagent/store"
)

// poisonedStore is a store whose Open of some keys fails its integrity
// check, as the s3 store's does for data changed in the bucket.
type poisonedStore struct {
	store.Store
	mu  sync.Mutex
	bad map[string]error
}

func (p *poisonedStore) poison(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bad[key] = fmt.Errorf("store: open %s: download: %w: memory of %s: received 4096 bytes with sha256 00…, signed for 4096 bytes with sha256 ff…",
		key, store.ErrIntegrity, key)
}

func (p *poisonedStore) Open(ctx context.Context, key string) (string, func(), error) {
	p.mu.Lock()
	err := p.bad[key]
	p.mu.Unlock()
	if err != nil {
		return "", nil, err
	}
	return p.Store.Open(ctx, key)
}

// TestStageIntegrityCheckFailed: data that fails its integrity check is
// refused to the shim with the reason (HTTP 422, IntegrityCheckFailed),
// the Snapshot gets a Warning Event saying so, and the data stays.
func TestStageIntegrityCheckFailed(t *testing.T) {
	local, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st := &poisonedStore{Store: local, bad: map[string]error{}}
	a := startAgent(t, st)
	snap, ref := a.readySnapshot("tampered")
	a.restoringPod(a.ns, "clone", a.clone(a.ns, "clone", snap.Name), ref)
	st.poison(storeKey(t, "Snapshot", snap))

	c := stageapi.NewClient(a.stageSocket)
	var stageErr error
	a.eventually("the stage socket answers", func() error {
		_, stageErr = c.Stage(context.Background(), stageapi.StageRequest{Kind: ref.Kind, UID: ref.UID})
		if errors.Is(stageErr, syscall.ENOENT) || errors.Is(stageErr, syscall.ECONNREFUSED) {
			return stageErr
		}
		return nil
	})
	var se *stageapi.Error
	if !errors.As(stageErr, &se) || se.Status != 422 || !errors.Is(stageErr, stageapi.ErrIntegrityCheckFailed) {
		t.Fatalf("stage of tampered data = %v, want HTTP 422 with reason IntegrityCheckFailed", stageErr)
	}
	t.Logf("the shim gets: %v", stageErr)
	t.Logf("the Snapshot's Event: %s", a.waitEvent(snap, corev1.EventTypeWarning, stageapi.ReasonIntegrityCheckFailed, "memory of"))
	if _, err := local.Status(context.Background(), storeKey(t, "Snapshot", snap)); err != nil {
		t.Fatalf("the refused data was removed: %v", err)
	}
}

// TestRestoreClaimOfTamperedData: a restore claim (a warm pool pod or a
// start slot taking a clone's data) of data that fails its integrity
// check restores nothing, fails the claim and puts the same Warning Event
// on the Snapshot as a refused stage does.
func TestRestoreClaimOfTamperedData(t *testing.T) {
	local, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st := &poisonedStore{Store: local, bad: map[string]error{}}
	a := startAgent(t, st)
	snap, ref := a.readySnapshot("tampered-claim")
	st.poison(storeKey(t, "Snapshot", snap))
	child := a.clone(a.ns, "tampered-child", snap.Name)
	_, vm := a.restoreClaimPod(child, "tamperedclaim0000001", ref)
	a.waitVMReady("tampered-child", metav1.ConditionFalse, sandlotv1.ReasonClaimFailed)
	if _, _, _, restores := vm.calls(); len(restores) != 0 {
		t.Fatalf("tampered data restored: %v", restores)
	}
	t.Logf("the Snapshot's Event: %s", a.waitEvent(snap, corev1.EventTypeWarning, stageapi.ReasonIntegrityCheckFailed, "memory of"))
}
