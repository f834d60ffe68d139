package e2b

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

const (
	// defaultLogLimit and maxLogLimit bound the lines a logs call answers.
	defaultLogLimit = 1000
	maxLogLimit     = 10000
	// maxLogBytes bounds what is read from the kubelet per call.
	maxLogBytes = 8 << 20
)

// logLine is one line of a sandbox's log with the kubelet's timestamp.
type logLine struct {
	at      time.Time
	level   string
	message string
	step    int // a build log's step (0: none)
}

// logLevels orders E2B's levels; a query's level is the minimum returned.
var logLevels = map[string]int{"debug": 0, "info": 1, "warn": 2, "error": 3}

// logQuery is a logs call's filter, already validated.
type logQuery struct {
	cursor   time.Time // zero: from the start (forward) or the end (backward)
	backward bool
	limit    int
	level    int
	search   string
}

// logs answers GET /v2/sandboxes/{id}/logs: the lines `kubectl logs`
// shows for the sandbox's pod (its start command's output), oldest first
// (or newest first with direction=backward), from the cursor (ms).
func (s *Server) logs(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	lines, aerr := s.queriedLogs(r, "cursor")
	if aerr != nil {
		return 0, nil, aerr
	}
	return http.StatusOK, map[string]any{"logs": entries(lines)}, nil
}

// logsV1 answers the deprecated GET /sandboxes/{id}/logs (start in ms).
func (s *Server) logsV1(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	lines, aerr := s.queriedLogs(r, "start")
	if aerr != nil {
		return 0, nil, aerr
	}
	plain := make([]map[string]string, 0, len(lines))
	for _, l := range lines {
		plain = append(plain, map[string]string{"timestamp": l.at.Format(time.RFC3339Nano), "line": l.message})
	}
	return http.StatusOK, map[string]any{"logs": plain, "logEntries": entries(lines)}, nil
}

// queriedLogs is the sandbox's log filtered by the request's query, whose
// cursor parameter is cursorName.
func (s *Server) queriedLogs(r *http.Request, cursorName string) ([]logLine, *apiError) {
	q, aerr := parseLogQuery(r.URL.Query(), cursorName)
	if aerr != nil {
		return nil, aerr
	}
	lines, aerr := s.sandboxLogs(r.Context(), r.PathValue("id"))
	if aerr != nil {
		return nil, aerr
	}
	return q.apply(lines), nil
}

// entries are lines as E2B's SandboxLogEntry (fields: none are parsed).
func entries(lines []logLine) []map[string]any {
	out := make([]map[string]any, 0, len(lines))
	for _, l := range lines {
		out = append(out, map[string]any{"timestamp": l.at.Format(time.RFC3339Nano), "level": l.level,
			"message": l.message, "fields": map[string]string{}})
	}
	return out
}

// parseLogQuery reads cursor (or start), limit, direction, level and search.
func parseLogQuery(v map[string][]string, cursorName string) (logQuery, *apiError) {
	get := func(k string) string {
		if len(v[k]) == 0 {
			return ""
		}
		return v[k][0]
	}
	q := logQuery{limit: defaultLogLimit, level: logLevels["debug"], search: get("search")}
	if c := get(cursorName); c != "" {
		ms, err := strconv.ParseInt(c, 10, 64)
		if err != nil || ms < 0 {
			return q, errorf(http.StatusBadRequest, "%s must be a unix time in milliseconds, got %q", cursorName, c)
		}
		q.cursor = time.UnixMilli(ms)
	}
	if l := get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 || n > maxLogLimit {
			return q, errorf(http.StatusBadRequest, "limit must be 0 to %d, got %q", maxLogLimit, l)
		}
		q.limit = n
	}
	switch d := get("direction"); d {
	case "", "forward":
	case "backward":
		q.backward = true
	default:
		return q, errorf(http.StatusBadRequest, "direction must be forward or backward, got %q", d)
	}
	if l := get("level"); l != "" {
		n, ok := logLevels[l]
		if !ok {
			return q, errorf(http.StatusBadRequest, "level must be debug, info, warn or error, got %q", l)
		}
		q.level = n
	}
	return q, nil
}

// apply filters lines (oldest first) by the query and orders them.
func (q logQuery) apply(lines []logLine) []logLine {
	var out []logLine
	for _, l := range lines {
		inRange := q.cursor.IsZero() || (!q.backward && !l.at.Before(q.cursor)) || (q.backward && !l.at.After(q.cursor))
		if inRange && logLevels[l.level] >= q.level && strings.Contains(l.message, q.search) {
			out = append(out, l)
		}
	}
	if q.backward {
		slices.Reverse(out)
	}
	return out[:min(len(out), q.limit)]
}

// sandboxLogs reads the sandbox pod's log through the Kubernetes API; a
// sandbox without a pod (paused, not yet placed) has none.
func (s *Server) sandboxLogs(ctx context.Context, id string) ([]logLine, *apiError) {
	sbx, aerr := s.sandbox(ctx, id, true)
	if aerr != nil {
		return nil, aerr
	}
	if sbx.Status.PodName == "" {
		return nil, nil
	}
	rc, err := s.kube.podLogs(ctx, sbx.Namespace, sbx.Status.PodName, &corev1.PodLogOptions{
		Container: sandlotv1.ContainerName, Timestamps: true, LimitBytes: ptr.To[int64](maxLogBytes)})
	if apierrors.IsNotFound(err) || apierrors.IsBadRequest(err) { // gone, or not started yet
		return nil, nil
	}
	if err != nil {
		return nil, kubeError("read the sandbox's log", err)
	}
	defer rc.Close()
	return parseLogLines(rc), nil
}

// parseLogLines reads the kubelet's "<RFC 3339 time> <line>" lines. A line
// that is a JSON object with level and msg (slog's shape) keeps them.
func parseLogLines(r io.Reader) []logLine {
	var out []logLine
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		ts, msg, _ := strings.Cut(sc.Text(), " ")
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			continue // a line the kubelet cut at LimitBytes
		}
		l := logLine{at: at, level: "info", message: msg}
		var structured struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
		}
		if strings.HasPrefix(msg, "{") && json.Unmarshal([]byte(msg), &structured) == nil && structured.Msg != "" {
			if lv := strings.ToLower(structured.Level); isLevel(lv) {
				l.level, l.message = lv, structured.Msg
			}
		}
		out = append(out, l)
	}
	return out
}

func isLevel(l string) bool {
	_, ok := logLevels[l]
	return ok
}
