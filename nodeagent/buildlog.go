package nodeagent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// buildLogLimit bounds a build log: a ConfigMap holds at most 1 MiB.
// Output past it is dropped (with one line saying so); the steps' own
// lines and the result are always kept.
const buildLogLimit = 900 << 10

// buildLogEntry is one line of a build log (sandlotv1.BuildLogKey).
type buildLogEntry struct {
	Time  time.Time `json:"t"`
	Level string    `json:"level"`
	Msg   string    `json:"msg"`
	Step  int       `json:"step"` // 1-based; 0 for the build's own lines
}

// buildLog collects a builder's log and writes it to its ConfigMap
// (owned by the Template) as it grows.
type buildLog struct {
	c       client.Client
	key     client.ObjectKey
	owner   metav1.OwnerReference
	mu      sync.Mutex
	buf     bytes.Buffer
	partial map[int]string // a step's output line not ended yet
	dropped bool
	dirty   bool
}

func newBuildLog(c client.Client, tpl *sandlotv1.Template, builder string) *buildLog {
	return &buildLog{c: c, key: client.ObjectKey{Namespace: tpl.Namespace, Name: sandlotv1.BuildLogName(builder)},
		owner: metav1.OwnerReference{APIVersion: sandlotv1.GroupVersion.String(), Kind: "Template", Name: tpl.Name, UID: tpl.UID,
			Controller: ptr.To(false)}, partial: map[int]string{}}
}

// line adds one line of the build's own (always kept).
func (l *buildLog) line(step int, level, format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.add(buildLogEntry{Time: time.Now().UTC(), Level: level, Msg: fmt.Sprintf(format, args...), Step: step}, true)
}

// output adds a step's output, split into lines.
func (l *buildLog) output(step int, chunk []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	text := l.partial[step] + string(chunk)
	lines := strings.Split(text, "\n")
	l.partial[step] = lines[len(lines)-1]
	for _, s := range lines[:len(lines)-1] {
		l.add(buildLogEntry{Time: time.Now().UTC(), Level: "info", Msg: s, Step: step}, false)
	}
}

// endStep writes what is left of a step's last line.
func (l *buildLog) endStep(step int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.partial[step]; s != "" {
		l.add(buildLogEntry{Time: time.Now().UTC(), Level: "info", Msg: s, Step: step}, false)
	}
	delete(l.partial, step)
}

func (l *buildLog) add(e buildLogEntry, keep bool) {
	b, _ := json.Marshal(e)
	if !keep && l.buf.Len()+len(b) > buildLogLimit {
		if !l.dropped {
			l.dropped = true
			l.add(buildLogEntry{Time: e.Time, Level: "warn", Step: e.Step,
				Msg: fmt.Sprintf("the build log reached %d KiB: further output is left out", buildLogLimit>>10)}, true)
		}
		return
	}
	l.buf.Write(b)
	l.buf.WriteByte('\n')
	l.dirty = true
}

// flush writes the log to its ConfigMap when it changed.
func (l *buildLog) flush(ctx context.Context) error {
	l.mu.Lock()
	if !l.dirty {
		l.mu.Unlock()
		return nil
	}
	data := l.buf.String()
	l.dirty = false
	l.mu.Unlock()
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: l.key.Name, Namespace: l.key.Namespace,
			Labels:          map[string]string{sandlotv1.LabelBuildLog: l.owner.Name},
			OwnerReferences: []metav1.OwnerReference{l.owner}},
		Data: map[string]string{sandlotv1.BuildLogKey: data}}
	if err := l.c.Patch(ctx, cm, client.Apply, client.FieldOwner(BuildFieldManager), client.ForceOwnership); err != nil {
		l.mu.Lock()
		l.dirty = true
		l.mu.Unlock()
		return fmt.Errorf("write build log %s: %w", l.key, err)
	}
	return nil
}

// flushEvery writes the log each period until ctx ends.
func (l *buildLog) flushEvery(ctx context.Context, period time.Duration, onErr func(error)) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := l.flush(ctx); err != nil {
				onErr(err)
			}
		}
	}
}
