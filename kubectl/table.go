package kubectl

import (
	"cmp"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

const none = "<none>"

// table is what `ls` prints without -o json|yaml: one row per object,
// its namespace kept aside for -A.
type table struct {
	headers    []string
	rows       [][]string
	namespaces []string
}

func (t *table) add(o client.Object, cells ...string) {
	t.rows = append(t.rows, cells)
	t.namespaces = append(t.namespaces, o.GetNamespace())
}

// print writes the table, kubectl-style; an empty one says so on the
// table's stream instead, as kubectl does.
func (t *table) print(w io.Writer, withNamespace bool, kind string) error {
	if len(t.rows) == 0 {
		_, err := fmt.Fprintf(w, "No %s found.\n", kind)
		return err
	}
	tw := printers.GetNewTabWriter(w)
	headers := t.headers
	if withNamespace {
		headers = append([]string{"NAMESPACE"}, headers...)
	}
	fmt.Fprintln(tw, strings.Join(headers, "\t"))
	for i, row := range t.rows {
		if withNamespace {
			row = append([]string{t.namespaces[i]}, row...)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("print the table: %w", err)
	}
	return nil
}

func sandboxTable(list client.ObjectList, wide bool, now time.Time) *table {
	t := &table{headers: []string{"NAME", "PHASE", "ID", "NODE", "SOURCE", "AGE"}}
	if wide {
		t.headers = append(t.headers, "IP", "EXPIRES", "VMREADY")
	}
	for i := range list.(*sandlotv1.SandboxList).Items {
		s := &list.(*sandlotv1.SandboxList).Items[i]
		cells := []string{s.Name, sandboxPhase(s), sandboxID(s), or(s.Status.NodeName), sandboxSource(s), age(s, now)}
		if wide {
			cells = append(cells, or(s.Status.PodIP), expires(s, now), vmReady(s))
		}
		t.add(s, cells...)
	}
	return t
}

func snapshotTable(list client.ObjectList, wide bool, now time.Time) *table {
	t := &table{headers: dataHeaders(wide)}
	for i := range list.(*sandlotv1.SnapshotList).Items {
		s := &list.(*sandlotv1.SnapshotList).Items[i]
		source := "sandbox/" + s.Spec.Source.Sandbox
		if s.Spec.Source.Import != nil {
			source = "import"
		}
		t.add(s, dataCells(s, source, &s.Status.DataStatus, wide, now)...)
	}
	return t
}

func pausedTable(list client.ObjectList, wide bool, now time.Time) *table {
	t := &table{headers: dataHeaders(wide)}
	for i := range list.(*sandlotv1.PausedSandboxList).Items {
		p := &list.(*sandlotv1.PausedSandboxList).Items[i]
		// A PausedSandbox has its Sandbox's name (and an owner reference).
		t.add(p, dataCells(p, "sandbox/"+p.Name, &p.Status.DataStatus, wide, now)...)
	}
	return t
}

func dataHeaders(wide bool) []string {
	h := []string{"NAME", "PHASE", "NODE", "SOURCE", "REMOTESTATUS", "BYTES", "AGE"}
	if wide {
		h = append(h, "DIRTY", "LOCATION")
	}
	return h
}

func dataCells(o client.Object, source string, st *sandlotv1.DataStatus, wide bool, now time.Time) []string {
	cells := []string{o.GetName(), or(string(st.Phase)), or(st.NodeName), source, or(string(st.RemoteStatus)),
		humanBytes(st.TotalBytes), age(o, now)}
	if wide {
		cells = append(cells, humanBytes(st.DirtyBytes), or(st.Location))
	}
	return cells
}

func or(s string) string { return cmp.Or(s, none) }

func sandboxPhase(s *sandlotv1.Sandbox) string {
	if s.DeletionTimestamp != nil {
		return "Terminating"
	}
	return or(string(s.Status.Phase))
}

// sandboxID is the status's ID, or the one derived from the UID before
// the controller has written it.
func sandboxID(s *sandlotv1.Sandbox) string {
	return cmp.Or(s.Status.SandboxID, sandlotv1.SandboxIDFor(s.UID))
}

func sandboxSource(s *sandlotv1.Sandbox) string {
	switch {
	case s.Status.Source != "":
		return s.Status.Source
	case s.Spec.Source.Snapshot != "":
		return "snapshot/" + s.Spec.Source.Snapshot
	}
	return "template/" + s.Spec.Source.Template
}

func age(o client.Object, now time.Time) string {
	return duration.HumanDuration(now.Sub(o.GetCreationTimestamp().Time))
}

// expires says when a running sandbox ends; paused ones do not expire.
func expires(s *sandlotv1.Sandbox, now time.Time) string {
	switch {
	case s.Spec.Paused || s.Status.Phase == sandlotv1.SandboxPaused:
		return "paused"
	case s.Status.ExpiresAt == nil:
		return none
	case !s.Status.ExpiresAt.After(now):
		return "expired"
	}
	return "in " + duration.HumanDuration(s.Status.ExpiresAt.Sub(now))
}

// vmReady is the VMReady condition's status (the node agent's: True is
// "the VM answers").
func vmReady(s *sandlotv1.Sandbox) string {
	if c := meta.FindStatusCondition(s.Status.Conditions, sandlotv1.ConditionVMReady); c != nil {
		return string(c.Status)
	}
	return none
}

// humanBytes is a size in IEC units ("1.5GiB"); none when unknown.
func humanBytes(n int64) string {
	if n <= 0 {
		return none
	}
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// templateTable: BASES counts the base snapshots of the current revision
// (Ready of all nodes'), POOL the warm pool's Ready pods of what its
// nodes keep (spec.warmPool on each node the pool runs on).
func templateTable(list client.ObjectList, wide bool, now time.Time) *table {
	t := &table{headers: []string{"NAME", "IMAGE", "BASES", "POOL", "AGE"}}
	if wide {
		t.headers = append(t.headers, "SLOTS", "VCPU", "MEMORY", "BASE")
	}
	for i := range list.(*sandlotv1.TemplateList).Items {
		tpl := &list.(*sandlotv1.TemplateList).Items[i]
		var ready, slots int32
		for _, p := range tpl.Status.Pool {
			ready, slots = ready+p.Ready, slots+p.Slots
		}
		pool := fmt.Sprintf("%d/%d", ready, tpl.Spec.WarmPool*int32(len(tpl.Status.Pool)))
		cells := []string{tpl.Name, tpl.Spec.Image, baseCount(tpl), pool, age(tpl, now)}
		if wide {
			base := none
			if c := meta.FindStatusCondition(tpl.Status.Conditions, sandlotv1.ConditionBaseSnapshotReady); c != nil {
				base = c.Reason
			}
			vcpu, mem := none, none // unset: the node's defaults
			if r := tpl.Spec.Resources; r.VCPU > 0 {
				vcpu = fmt.Sprint(r.VCPU)
			}
			if r := tpl.Spec.Resources; r.MemoryMiB > 0 {
				mem = fmt.Sprintf("%dMiB", r.MemoryMiB)
			}
			cells = append(cells, fmt.Sprint(slots), vcpu, mem, base)
		}
		t.add(tpl, cells...)
	}
	return t
}

// baseCount is "ready/total" of the base snapshots of the template's
// current revision (all of them before the controller names one).
func baseCount(tpl *sandlotv1.Template) string {
	ready, total := 0, 0
	for _, b := range tpl.Status.BaseSnapshots {
		if tpl.Status.BaseRevision != "" && b.Revision != tpl.Status.BaseRevision {
			continue
		}
		total++
		if b.Phase == sandlotv1.BaseReady {
			ready++
		}
	}
	return fmt.Sprintf("%d/%d", ready, total)
}
