package e2b

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// buildLine is one line of a build log as the node agent writes it.
type buildLine struct {
	Time  time.Time `json:"t"`
	Level string    `json:"level"`
	Msg   string    `json:"msg"`
	Step  int       `json:"step"`
}

// maxStatusLogs is the most log entries one status call returns.
const maxStatusLogs = 100

// buildStatus answers GET /templates/{id}/builds/{buildID}/status: the
// state of the template's base for that build, and its log from
// logsOffset on (level: the minimum).
func (s *Server) buildStatus(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	tpl, aerr := s.buildTemplate(r)
	if aerr != nil {
		return 0, nil, aerr
	}
	q := r.URL.Query()
	offset, err := strconv.Atoi(q.Get("logsOffset"))
	if q.Get("logsOffset") == "" {
		offset, err = 0, nil
	}
	limit, lerr := strconv.Atoi(q.Get("limit"))
	if q.Get("limit") == "" {
		limit, lerr = maxStatusLogs, nil
	}
	if err != nil || offset < 0 || lerr != nil || limit < 0 || limit > maxStatusLogs {
		return 0, nil, errorf(http.StatusBadRequest, "logsOffset must be ≥ 0 and limit 0..%d", maxStatusLogs)
	}
	minLevel := 0
	if l := q.Get("level"); l != "" {
		n, ok := logLevels[l]
		if !ok {
			return 0, nil, errorf(http.StatusBadRequest, "level must be debug, info, warn or error, got %q", l)
		}
		minLevel = n
	}
	state, followed := buildState(tpl)
	lines, aerr := s.buildLog(r.Context(), tpl, followed)
	if aerr != nil {
		return 0, nil, aerr
	}
	var kept []buildLine
	for _, l := range lines {
		if logLevels[l.Level] >= minLevel {
			kept = append(kept, l)
		}
	}
	page := kept[min(offset, len(kept)):min(offset+limit, len(kept))]
	body := map[string]any{"templateID": tpl.Name, "buildID": tpl.Spec.Build.ID, "status": state,
		"logEntries": buildEntries(page), "logs": plainLines(page)}
	if state == "error" {
		body["reason"] = failureReason(followed, lines)
	}
	return http.StatusOK, body, nil
}

// buildLogs answers GET /templates/{id}/builds/{buildID}/logs.
func (s *Server) buildLogs(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	tpl, aerr := s.buildTemplate(r)
	if aerr != nil {
		return 0, nil, aerr
	}
	if src := r.URL.Query().Get("source"); src != "" && src != "temporary" && src != "persistent" {
		return 0, nil, errorf(http.StatusBadRequest, "source must be temporary or persistent, got %q", src)
	}
	q, aerr := parseLogQuery(r.URL.Query(), "cursor")
	if aerr != nil {
		return 0, nil, aerr
	}
	q.limit = min(q.limit, maxStatusLogs)
	_, followed := buildState(tpl)
	lines, aerr := s.buildLog(r.Context(), tpl, followed)
	if aerr != nil {
		return 0, nil, aerr
	}
	asLog := make([]logLine, 0, len(lines))
	for _, l := range lines {
		asLog = append(asLog, logLine{at: l.Time, level: l.Level, message: l.Msg, step: l.Step})
	}
	var out []buildLine
	for _, l := range q.apply(asLog) {
		out = append(out, buildLine{Time: l.at, Level: l.level, Msg: l.message, Step: l.step})
	}
	return http.StatusOK, map[string]any{"logs": buildEntries(out)}, nil
}

// buildTemplate is the template of the request whose current build is
// the request's buildID.
func (s *Server) buildTemplate(r *http.Request) (*sandlotv1.Template, *apiError) {
	name, buildID := r.PathValue("id"), r.PathValue("buildID")
	key := client.ObjectKey{Namespace: teamOf(r.Context()), Name: name}
	tpl := &sandlotv1.Template{}
	err := s.kube.Get(r.Context(), key, tpl)
	if err != nil || tpl.Spec.Build == nil || tpl.Spec.Build.ID != buildID {
		// The cache may not hold the build this API started a moment ago.
		err = s.kube.direct.Get(r.Context(), key, tpl)
	}
	if err != nil {
		return nil, errorf(http.StatusNotFound, "template %q not found", name)
	}
	if tpl.Spec.Build == nil || tpl.Spec.Build.ID != buildID {
		return nil, errorf(http.StatusNotFound, "build %q is not template %q's current build", buildID, name)
	}
	return tpl, nil
}

// buildState is E2B's build status of the template's current spec, and
// the builder it follows: one (the first node's), so the log a client
// pages through with logsOffset stays one log, and its status is that
// builder's. A Template failing before any builder (a bad image) is an
// error with the condition's message.
func buildState(tpl *sandlotv1.Template) (string, *sandlotv1.BaseSnapshot) {
	c := meta.FindStatusCondition(tpl.Status.Conditions, sandlotv1.ConditionBaseSnapshotReady)
	if c == nil || c.ObservedGeneration != tpl.Generation || tpl.Status.ObservedGeneration != tpl.Generation {
		return "building", nil // the controller has not seen this build yet
	}
	var followed *sandlotv1.BaseSnapshot
	for i := range tpl.Status.BaseSnapshots {
		b := &tpl.Status.BaseSnapshots[i]
		if b.Revision == tpl.Status.BaseRevision && (followed == nil || b.Node < followed.Node) {
			followed = b
		}
	}
	switch {
	case followed == nil && c.Status != metav1.ConditionTrue && c.Reason != sandlotv1.ReasonBuilding:
		return "error", &sandlotv1.BaseSnapshot{Reason: c.Reason, Message: c.Message}
	case followed == nil:
		return "building", nil
	case followed.Phase == sandlotv1.BaseReady:
		return "ready", followed
	case followed.Phase == sandlotv1.BaseFailed && followed.RetryAt == nil:
		return "error", followed
	}
	// A failure that can pass (the image imported later, a builder lost)
	// is built again: to the SDK the build goes on, its log says why.
	return "building", followed
}

// retryLine is the log line of a failed attempt the controller builds
// again, or false; it follows the builder's last line (at its time: the
// failure's), not a time still to come.
func retryLine(b *sandlotv1.BaseSnapshot, lines []buildLine) (buildLine, bool) {
	if b == nil || b.Phase != sandlotv1.BaseFailed || b.RetryAt == nil {
		return buildLine{}, false
	}
	at := b.RetryAt.Time // no line logged: the builder never ran
	if len(lines) > 0 {
		at = lines[len(lines)-1].Time
	}
	return buildLine{Time: at, Level: "warn", Msg: fmt.Sprintf("attempt %d failed (%s: %s); building again at %s",
		b.Attempts, b.Reason, b.Message, b.RetryAt.UTC().Format(time.RFC3339))}, true
}

// buildLog is the log of the builder buildState follows, and the
// reason of a retry the controller scheduled.
func (s *Server) buildLog(ctx context.Context, tpl *sandlotv1.Template, followed *sandlotv1.BaseSnapshot) ([]buildLine, *apiError) {
	lines, aerr := s.builderLog(ctx, tpl, followed)
	if l, ok := retryLine(followed, lines); ok && aerr == nil {
		lines = append(lines, l)
	}
	return lines, aerr
}

func (s *Server) builderLog(ctx context.Context, tpl *sandlotv1.Template, followed *sandlotv1.BaseSnapshot) ([]buildLine, *apiError) {
	if followed == nil || followed.Snapshot == "" {
		return nil, nil
	}
	cm := &corev1.ConfigMap{}
	err := s.kube.Get(ctx, client.ObjectKey{Namespace: tpl.Namespace, Name: sandlotv1.BuildLogName(followed.Snapshot)}, cm)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, kubeError("read the build log", err)
	}
	return parseBuildLog(cm.Data[sandlotv1.BuildLogKey]), nil
}

func parseBuildLog(data string) []buildLine {
	var out []buildLine
	sc := bufio.NewScanner(strings.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var l buildLine
		if json.Unmarshal(sc.Bytes(), &l) == nil && isLevel(l.Level) {
			out = append(out, l)
		}
	}
	return out
}

// buildEntries are lines as E2B's BuildLogEntry.
func buildEntries(lines []buildLine) []map[string]any {
	out := make([]map[string]any, 0, len(lines))
	for _, l := range lines {
		e := map[string]any{"timestamp": l.Time.Format(time.RFC3339Nano), "level": l.Level, "message": l.Msg}
		if l.Step > 0 {
			e["step"] = strconv.Itoa(l.Step)
		}
		out = append(out, e)
	}
	return out
}

func plainLines(lines []buildLine) []string {
	out := make([]string, 0, len(lines))
	for _, l := range lines {
		out = append(out, "["+l.Time.Format(time.RFC3339)+"] "+l.Msg)
	}
	return out
}

// failedStep reads the step number from the agent's failure message.
var failedStep = regexp.MustCompile(`^step ([0-9]+): `)

// failureReason is E2B's BuildStatusReason of a failed base: its message,
// the failing step, and that step's last lines.
func failureReason(b *sandlotv1.BaseSnapshot, lines []buildLine) map[string]any {
	reason := map[string]any{"message": b.Message, "logEntries": []map[string]any{}}
	m := failedStep.FindStringSubmatch(b.Message)
	if m == nil {
		return reason
	}
	reason["step"] = m[1]
	n, _ := strconv.Atoi(m[1])
	var own []buildLine
	for _, l := range lines {
		if l.Step == n {
			own = append(own, l)
		}
	}
	reason["logEntries"] = buildEntries(own[max(0, len(own)-20):])
	return reason
}
