package nodeagent

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sandlot-dev/sandlot/api/sealed"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// BuildFieldManager owns a builder sandbox's Built condition and its
// build log ConfigMap (server-side apply).
const BuildFieldManager = "sandlot-agent-build"

// buildDeadline bounds a build's steps and start (the controller gives up
// on the builder a little later).
const buildDeadline = time.Hour

// builds runs the build steps of the template builders on this node: once
// a builder's VM runs, its template's spec.build, through the guest agent.
type builds struct {
	client.Client
	Reader   client.Reader // Templates and files, read when needed
	Recorder events.EventRecorder
	Node     string
	// key opens each builder's envd token, sealed to this node on its pod.
	key *sealed.Key
	// guest opens a builder's VM (newGuestExec; a fake in unit tests).
	guest func(podIP, token string) guestRunner
	// started holds each builder this agent started (kept once done, so
	// a cache still showing BuildRunning is not taken for a lost build).
	started sync.Map // builder sandbox UID → struct{}
}

// maybeStart starts the build of sbx, a template's builder whose VM runs
// in pod, unless it ran (or runs) for this generation already.
func (b *builds) maybeStart(ctx context.Context, sbx *sandlotv1.Sandbox, pod *corev1.Pod) error {
	name := sbx.Annotations[sandlotv1.AnnotationBaseOf]
	if name == "" || sbx.Annotations[sandlotv1.AnnotationBuildNode] != b.Node || !podReady(pod) {
		return nil // not a builder here, or its guest agent does not answer yet (the kubelet's probe)
	}
	c := meta.FindStatusCondition(sbx.Status.Conditions, sandlotv1.ConditionBuilt)
	if c != nil && c.ObservedGeneration == sbx.Generation && (c.Status == metav1.ConditionTrue || c.Reason == sandlotv1.ReasonBuildStepFailed) {
		return nil // done
	}
	if _, busy := b.started.LoadOrStore(sbx.UID, struct{}{}); busy {
		return nil
	}
	tpl := &sandlotv1.Template{}
	err := b.Reader.Get(ctx, client.ObjectKey{Namespace: sbx.Namespace, Name: name}, tpl)
	if err != nil || tpl.Spec.Build == nil || !metav1.IsControlledBy(sbx, tpl) ||
		sandlotv1.BuildDigest(tpl.Spec.Build) != sbx.Annotations[sandlotv1.AnnotationBuildDigest] {
		// No build, a newer one (the controller replaces this builder), or
		// not the Template's own builder.
		b.started.Delete(sbx.UID)
		return client.IgnoreNotFound(err)
	}
	if c != nil && c.ObservedGeneration == sbx.Generation {
		// Running, but not here: the agent that ran it went away midway,
		// and a step is not safe to run twice.
		err := b.setBuilt(ctx, sbx, metav1.ConditionFalse, sandlotv1.ReasonBuildStepFailed,
			"the node agent restarted during the build; build the template again", 0)
		if err != nil {
			b.started.Delete(sbx.UID)
		}
		return err
	}
	token, err := builderToken(b.key, pod, sbx.Name)
	if err != nil {
		b.started.Delete(sbx.UID)
		return err
	}
	g := b.guest(pod.Status.PodIP, token)
	from, err := fromStep(sbx, tpl.Spec.Build)
	if err == nil {
		err = b.setBuilt(ctx, sbx, metav1.ConditionFalse, sandlotv1.ReasonBuildRunning,
			fmt.Sprintf("running build steps %d to %d", from+1, len(tpl.Spec.Build.Steps)), 0)
	}
	if err != nil {
		b.started.Delete(sbx.UID)
		return err
	}
	go b.run(context.WithoutCancel(ctx), sbx, tpl, g, from)
	return nil
}

// fromStep is how many of the build's steps the builder's checkpoint
// holds (0: it booted the image).
func fromStep(sbx *sandlotv1.Sandbox, b *sandlotv1.TemplateBuild) (int, error) {
	v, ok := sbx.Annotations[sandlotv1.AnnotationBuildFromStep]
	if !ok {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > len(b.Steps) {
		return 0, fmt.Errorf("builder %s: %s=%q is not a step of its build (0 to %d)", sbx.Name, sandlotv1.AnnotationBuildFromStep, v, len(b.Steps))
	}
	return n, nil
}

// run carries out one build and reports it in the Built condition.
func (b *builds) run(ctx context.Context, sbx *sandlotv1.Sandbox, tpl *sandlotv1.Template, g guestRunner, from int) {
	ctx, cancel := context.WithTimeout(ctx, buildDeadline)
	defer cancel()
	logger := log.FromContext(ctx).WithValues("builder", sbx.Name, "template", tpl.Name)
	blog := newBuildLog(b.Client, tpl, sbx.Name)
	fctx, stopFlush := context.WithCancel(ctx)
	go blog.flushEvery(fctx, time.Second, func(err error) { logger.Error(err, "build log") })
	env := map[string]string{}
	for _, e := range tpl.Spec.Env {
		env[e.Name] = e.Value
	}
	steps := &stepRunner{g: g, log: blog, env: env, readyPoll: time.Second,
		files:      func(ctx context.Context, hash string) ([]byte, error) { return b.files(ctx, tpl.Namespace, hash) },
		checkpoint: func(ctx context.Context, n int) error { return b.checkpoint(ctx, sbx, tpl, n) }}
	blog.line(0, "info", "building template %s on %s: %d steps", tpl.Name, b.Node, len(tpl.Spec.Build.Steps))
	err := steps.runAll(ctx, tpl.Spec.Build, from)
	status, reason, msg := metav1.ConditionTrue, sandlotv1.ReasonBuildSucceeded, "the build steps ran and the start command is ready"
	if err != nil {
		status, reason, msg = metav1.ConditionFalse, sandlotv1.ReasonBuildStepFailed, err.Error()
		blog.line(0, "error", "build failed: %v", err)
	} else {
		blog.line(0, "info", "build done: snapshotting")
	}
	stopFlush()
	// The result is written even when the build ran out of time.
	rctx, done := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer done()
	if ferr := blog.flush(rctx); ferr != nil {
		logger.Error(ferr, "build log")
	}
	if err := b.setBuilt(rctx, sbx, status, reason, msg, 0); err != nil {
		logger.Error(err, "report the build")
	}
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue && pod.Status.PodIP != ""
		}
	}
	return false
}

// files reads a COPY step's uploaded tar from its ConfigMap.
func (b *builds) files(ctx context.Context, ns, hash string) ([]byte, error) {
	cm := &corev1.ConfigMap{}
	if err := b.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: sandlotv1.BuildFilesName(hash)}, cm); err != nil {
		return nil, fmt.Errorf("the files %s were not uploaded: %w", hash, err)
	}
	if cm.Annotations[sandlotv1.AnnotationFilesHash] != hash {
		return nil, fmt.Errorf("ConfigMap %s holds other files than %s", cm.Name, hash)
	}
	data, ok := cm.BinaryData[sandlotv1.BuildFilesKey]
	if !ok {
		return nil, fmt.Errorf("ConfigMap %s has no %s", cm.Name, sandlotv1.BuildFilesKey)
	}
	return data, nil
}

// setBuilt applies the builder's Built condition, and the step it waits
// for a checkpoint after (0: none).
func (b *builds) setBuilt(ctx context.Context, sbx *sandlotv1.Sandbox, status metav1.ConditionStatus, reason, msg string, checkpoint int) error {
	if len(msg) > 16<<10 {
		msg = msg[:16<<10]
	}
	fields := map[string]any{"conditions": []any{conditionFields(sandlotv1.ConditionBuilt, status, reason, msg, sbx.Generation)}}
	if checkpoint > 0 {
		fields["buildCheckpoint"] = checkpoint
	}
	if err := applySandboxStatus(ctx, b.Client, sbx.Namespace, sbx.Name, BuildFieldManager, fields); err != nil {
		return fmt.Errorf("apply Built of builder %s: %w", sbx.Name, err)
	}
	if b.Recorder != nil && (status == metav1.ConditionTrue || reason == sandlotv1.ReasonBuildStepFailed) {
		typ := corev1.EventTypeNormal
		if status != metav1.ConditionTrue {
			typ = corev1.EventTypeWarning
		}
		b.Recorder.Eventf(sbx, nil, typ, reason, "Build", "%s", msg)
	}
	return nil
}
