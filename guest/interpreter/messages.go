package interpreter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// maxRequestBody bounds a request body; code cells are small, but a cell
// can embed data, so the limit is generous.
const maxRequestBody = 32 << 20

// executeRequest is the body of POST /execute as the SDK sends it
// (JSON.stringify drops the undefined optional fields).
type executeRequest struct {
	Code      *string           `json:"code"`
	ContextID string            `json:"context_id"`
	Language  string            `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
}

// createContextRequest is the body of POST /contexts.
type createContextRequest struct {
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// kernelRequest is one line sent to the kernel on its fd 3.
type kernelRequest struct {
	Code string            `json:"code"`
	Env  map[string]string `json:"env,omitempty"`
	// Globals is the sandbox env when it changed since the kernel last got
	// it (e.g. after a snapshot restore); it stays applied.
	Globals map[string]string `json:"globals,omitempty"`
}

// Context is the JSON the SDK's Context type reads.
type Context struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// decodeExecuteRequest parses and validates a POST /execute body.
func decodeExecuteRequest(r io.Reader) (executeRequest, error) {
	var req executeRequest
	if err := decodeJSON(r, &req, false); err != nil {
		return req, err
	}
	if req.Code == nil {
		return req, errors.New(`"code" is required`)
	}
	if req.ContextID != "" && req.Language != "" {
		return req, errors.New("only one of context_id or language can be provided")
	}
	for k, v := range req.EnvVars {
		if err := checkEnvVar(k, v); err != nil {
			return req, err
		}
	}
	return req, nil
}

// decodeCreateContext parses a POST /contexts body; an empty body means
// all defaults.
func decodeCreateContext(r io.Reader) (createContextRequest, error) {
	var req createContextRequest
	err := decodeJSON(r, &req, true)
	return req, err
}

// decodeJSON reads exactly one JSON object from r.
func decodeJSON(r io.Reader, v any, emptyOK bool) error {
	body, err := io.ReadAll(io.LimitReader(r, maxRequestBody+1))
	if err != nil {
		return fmt.Errorf("read request body: %w", err)
	}
	if len(body) > maxRequestBody {
		return fmt.Errorf("request body is larger than %d bytes", maxRequestBody)
	}
	if emptyOK && len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("invalid JSON body: %w", err)
	}
	if dec.More() {
		return errors.New("invalid JSON body: unexpected data after the object")
	}
	return nil
}

// checkEnvVar rejects names os.environ would refuse, so the error is a
// clear 400 instead of a failed cell.
func checkEnvVar(k, v string) error {
	switch {
	case k == "":
		return errors.New("env_vars: empty variable name")
	case strings.ContainsAny(k, "=\x00"):
		return fmt.Errorf("env_vars: invalid variable name %q", k)
	case strings.ContainsRune(v, 0):
		return fmt.Errorf("env_vars: value of %q contains a NUL byte", k)
	}
	return nil
}

// outMessage is a stdout/stderr message the server itself adds to an
// execution stream (the kernel writes the others in their final shape).
type outMessage struct {
	Type      string `json:"type"`
	Text      string `json:"text"`
	Timestamp string `json:"timestamp"`
}

// errorMessage is an execution error as the SDK's ExecutionError reads it;
// name/value/traceback are always present, as the E2B server sends them.
func errorMessage(name, value string) any {
	return struct {
		Type      string `json:"type"`
		Name      string `json:"name"`
		Value     string `json:"value"`
		Traceback string `json:"traceback"`
	}{"error", name, value, ""}
}

func stderrMessage(text string) outMessage {
	return outMessage{Type: "stderr", Text: text, Timestamp: timestamp()}
}

// endOfExecution closes every stream, as the E2B server's does.
var endOfExecution = []byte(`{"type":"end_of_execution"}`)

func timestamp() string {
	return time.Now().UTC().Format("2006-01-02T15:04:05.000000Z")
}

// messageType reads the "type" of a protocol line; "" if it is not JSON.
func messageType(line []byte) string {
	// The kernel writes "type" first; this spares parsing a large image.
	if rest, ok := bytes.CutPrefix(line, []byte(`{"type": "`)); ok {
		if i := bytes.IndexByte(rest, '"'); i >= 0 {
			return string(rest[:i])
		}
	}
	var m struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(line, &m) != nil {
		return ""
	}
	return m.Type
}
