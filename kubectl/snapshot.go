package kubectl

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

type snapshotOptions struct {
	name       string
	waitRemote bool
	changeFlags
}

// check refuses --wait-remote without --wait, after the wait flags'
// own check (whose error comes first when both apply).
func (o *snapshotOptions) check(cmd *cobra.Command) error {
	if err := o.changeFlags.check(cmd); err != nil {
		return err
	}
	if o.waitRemote && !o.wait {
		return errUsage(cmd, "--wait-remote needs --wait")
	}
	return nil
}

func (r *root) snapshotCmd() *cobra.Command {
	o := &snapshotOptions{}
	cmd := r.sandboxCmd(&cobra.Command{
		Use:   "snapshot SANDBOX [--name NAME]",
		Short: "Snapshot a running sandbox (memory, devices, disk) and report the snapshot's remoteStatus",
		Example: "  kubectl sandlot snapshot my-sandbox --name before-upgrade --wait\n" +
			"  kubectl sandlot snapshot my-sandbox --wait --wait-remote   # until other nodes may restore it\n" +
			"  kubectl sandlot snapshot my-sandbox -o name",
	}, o, func(ctx context.Context, s *session, sbx *sandlotv1.Sandbox) error {
		return s.takeSnapshot(ctx, o, sbx)
	})
	cmd.Flags().StringVar(&o.name, "name", "", "the Snapshot's name (default: generated from the sandbox's)")
	cmd.Flags().BoolVar(&o.waitRemote, "wait-remote", false, "with --wait, also wait until remoteStatus is Ready (restorable on any node)")
	o.changeFlags.add(cmd, "the snapshot is Ready")
	return cmd
}

// takeSnapshot is the snapshot command's work: snapshot sbx and, with
// --wait, say where the snapshot can be restored once it is Ready.
func (s *session) takeSnapshot(ctx context.Context, o *snapshotOptions, sbx *sandlotv1.Sandbox) error {
	snap, err := s.createSnapshot(ctx, sbx, o.name)
	if err != nil {
		return err
	}
	if o.wait {
		if snap, err = s.waitSnapshot(ctx, &o.waitFlags, snap.Name, o.waitRemote); err != nil {
			return err
		}
		fmt.Fprintln(s.out, snapshotLine(snap))
	}
	return o.out.emit(s.objects, snap)
}

// createSnapshot makes a Snapshot of sbx named name (generated when "").
func (s *session) createSnapshot(ctx context.Context, sbx *sandlotv1.Sandbox, name string) (*sandlotv1.Snapshot, error) {
	if err := snapshottable(sbx); err != nil {
		return nil, err
	}
	snap := &sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns},
		Spec: sandlotv1.SnapshotSpec{Source: sandlotv1.SnapshotSource{Sandbox: sbx.Name}}}
	if name == "" {
		snap.GenerateName = sbx.Name + "-"
	}
	if err := s.c.Create(ctx, snap); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("snapshot %s already exists in namespace %s", name, s.ns)
		}
		return nil, fmt.Errorf("create a snapshot of sandbox %s: %w", sbx.Name, err)
	}
	fmt.Fprintf(s.out, "snapshot/%s created from sandbox/%s\n", snap.Name, sbx.Name)
	return snap, nil
}

// snapshottable refuses sandboxes without a running VM to save.
func snapshottable(sbx *sandlotv1.Sandbox) error {
	if err := sandboxFailed(sbx); err != nil {
		return err
	}
	if sbx.Spec.Paused || sbx.Status.Phase == sandlotv1.SandboxPaused || sbx.Status.Phase == sandlotv1.SandboxPausing {
		return fmt.Errorf("sandbox %s is paused: resume it first (kubectl sandlot resume %s)", sbx.Name, sbx.Name)
	}
	return nil
}

// waitSnapshot waits until the snapshot's data is Ready (and, with
// remote, restorable on other nodes), showing phase and remoteStatus.
func (s *session) waitSnapshot(ctx context.Context, w *waitFlags, name string, remote bool) (*sandlotv1.Snapshot, error) {
	what := "snapshot/" + name + " to be Ready"
	if remote {
		what += " with remoteStatus Ready"
	}
	var snap *sandlotv1.Snapshot
	err := s.wait(ctx, w, what, &sandlotv1.SnapshotList{}, []string{name}, func(objs objects, p *progress) (bool, error) {
		o, ok := objs[name]
		if !ok {
			return false, fmt.Errorf("snapshot %s was deleted while waiting for it", name)
		}
		snap = o.(*sandlotv1.Snapshot)
		p.show("snapshot/"+name, dataState(&snap.Status.DataStatus))
		return dataDone(&snap.Status.DataStatus, "snapshot "+name, remote)
	})
	return snap, err
}

// dataDone: the data of a Snapshot or PausedSandbox is persisted (and
// remotely Ready when remote), or failed.
func dataDone(st *sandlotv1.DataStatus, what string, remote bool) (bool, error) {
	switch {
	case st.Phase == sandlotv1.DataFailed:
		return false, fmt.Errorf("%s failed: %s", what, readyMessage(st))
	case st.Phase != sandlotv1.DataReady:
		return false, nil
	case !remote || st.RemoteStatus == sandlotv1.RemoteReady:
		return true, nil
	case st.RemoteStatus == sandlotv1.RemoteFailed:
		return false, fmt.Errorf("%s: upload to shared storage failed (remoteStatus Failed): %s", what, readyMessage(st))
	case st.RemoteStatus == sandlotv1.RemoteNotApplicable:
		return false, fmt.Errorf("%s is kept on node %s only (remoteStatus NotApplicable: the store is local): it never becomes restorable elsewhere", what, st.NodeName)
	}
	return false, nil
}

// dataState is one line about snapshot data: phase, node, remoteStatus.
func dataState(st *sandlotv1.DataStatus) string {
	line := "phase " + or(string(st.Phase))
	if st.NodeName != "" {
		line += " on " + st.NodeName
	}
	line += ", remoteStatus " + or(string(st.RemoteStatus))
	if c := meta.FindStatusCondition(st.Conditions, sandlotv1.ConditionReady); c != nil && c.Status != metav1.ConditionTrue && c.Message != "" {
		line += ", " + c.Reason + ": " + c.Message
	}
	return line
}

func readyMessage(st *sandlotv1.DataStatus) string {
	if c := meta.FindStatusCondition(st.Conditions, sandlotv1.ConditionReady); c != nil {
		return strings.TrimSuffix(c.Reason+": "+c.Message, ": ")
	}
	return "no reason given"
}

// snapshotLine is the result of a snapshot: where it can be restored.
func snapshotLine(snap *sandlotv1.Snapshot) string {
	return fmt.Sprintf("snapshot/%s ready on %s, %s", snap.Name, snap.Status.NodeName, remoteNote(&snap.Status.DataStatus))
}

// remoteNote says what remoteStatus means for where the data restores.
func remoteNote(st *sandlotv1.DataStatus) string {
	size := ""
	if st.TotalBytes > 0 {
		size = ", " + humanBytes(st.TotalBytes)
	}
	note := "remoteStatus " + or(string(st.RemoteStatus)) + size
	switch st.RemoteStatus {
	case sandlotv1.RemoteReady:
		return note + " (restorable on any compatible node)"
	case sandlotv1.RemoteNotApplicable:
		return note + " (local store: restorable on " + st.NodeName + " only)"
	case sandlotv1.RemoteFailed:
		return note + " (restorable on " + st.NodeName + " only: the upload failed)"
	}
	return note + " (restorable on " + st.NodeName + " now, on other nodes once remoteStatus is Ready)"
}
