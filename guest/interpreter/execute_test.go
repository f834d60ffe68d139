package interpreter

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestExpressionResult(t *testing.T) {
	f := newFixture(t)
	msgs := f.run(code("1+1"))
	if got := mainText(t, msgs); got != "2" {
		t.Fatalf("main result text = %q, want 2", got)
	}
	n := ofType(msgs, "number_of_executions")
	if len(n) != 1 || n[0]["execution_count"] != float64(1) {
		t.Fatalf("number_of_executions = %v, want execution_count 1", n)
	}
	if len(ofType(msgs, "error")) != 0 {
		t.Fatalf("unexpected error: %v", msgs)
	}
	// E2B strips the quotes of a string result; a trailing ';' hides it.
	if got := mainText(t, f.run(code("'abc'"))); got != "abc" {
		t.Fatalf("string result text = %q, want abc", got)
	}
	if r := ofType(f.run(code("1+1;")), "result"); len(r) != 0 {
		t.Fatalf("';' should suppress the result, got %v", r)
	}
}

func TestStdoutBeforeResult(t *testing.T) {
	f := newFixture(t)
	msgs := f.run(code("import sys\nprint('hello')\nprint('oops', file=sys.stderr)\n42"))
	iOut, iRes := -1, -1
	for i, m := range msgs {
		switch {
		case m.str("type") == "stdout" && iOut < 0:
			iOut = i
		case m.str("type") == "result":
			iRes = i
		}
	}
	if iOut < 0 || iRes < 0 || iOut > iRes {
		t.Fatalf("want stdout before result, got %v", msgs)
	}
	if got := stdout(msgs); got != "hello\n" {
		t.Fatalf("stdout = %q", got)
	}
	if e := ofType(msgs, "stderr"); len(e) != 1 || e[0].str("text") != "oops\n" || e[0].str("timestamp") == "" {
		t.Fatalf("stderr = %v", e)
	}
}

// A print is one stdout message, as with E2B's Jupyter kernel, even when its
// text and newline are written apart (python -u) and a flush of the cell's end
// races the background flusher: the SDK's logs.stdout is ["hello\n"].
func TestPrintIsOneMessage(t *testing.T) {
	f := newFixture(t)
	cells := []string{
		"print('hello')",
		"import sys, time\nsys.stdout.write('hel'); time.sleep(0.05); n = sys.stdout.write('lo\\n')",
	}
	for _, c := range cells {
		for i := 0; i < 20; i++ {
			var texts []string
			for _, m := range ofType(f.run(code(c)), "stdout") {
				texts = append(texts, m.str("text"))
			}
			if len(texts) != 1 || texts[0] != "hello\n" {
				t.Fatalf("run %d of %q: stdout messages %q, want [\"hello\\n\"]", i, c, texts)
			}
		}
	}
}

func TestSubprocessOutputIsCaptured(t *testing.T) {
	f := newFixture(t)
	msgs := f.run(code("import subprocess\nprint('a')\nsubprocess.run(['echo', 'b'])\nprint('c')"))
	if got := stdout(msgs); got != "a\nb\nc\n" {
		t.Fatalf("stdout = %q, want a b c in order", got)
	}
}

func TestException(t *testing.T) {
	f := newFixture(t)
	msgs := f.run(code("def f():\n    raise ValueError('boom')\nf()"))
	e := mustError(t, msgs, "ValueError")
	tb := e.str("traceback")
	if e.str("value") != "boom" || !strings.Contains(tb, "ValueError: boom") ||
		!strings.Contains(tb, "raise ValueError('boom')") {
		t.Fatalf("error = %v", e)
	}
	if strings.Contains(tb, "with_env") || strings.Contains(tb, `"<string>"`) {
		t.Fatalf("traceback shows kernel frames:\n%s", tb)
	}
	mustError(t, f.run(code("1 +")), "SyntaxError")
	// The kernel survives both.
	if got := mainText(t, f.run(code("3"))); got != "3" {
		t.Fatalf("after errors: %q", got)
	}
}

func TestStatePersists(t *testing.T) {
	f := newFixture(t)
	f.run(code("x = 41"))
	msgs := f.run(code("x + 1"))
	if got := mainText(t, msgs); got != "42" {
		t.Fatalf("x + 1 = %q", got)
	}
	if n := ofType(msgs, "number_of_executions"); n[0]["execution_count"] != float64(2) {
		t.Fatalf("execution_count = %v, want 2", n[0]["execution_count"])
	}
	// Top-level await works as in Jupyter.
	if got := mainText(t, f.run(code("import asyncio\nawait asyncio.sleep(0)\nx"))); got != "41" {
		t.Fatalf("await cell = %q", got)
	}
}

func TestRestartForgets(t *testing.T) {
	f := newFixture(t)
	c := f.newContext(nil)
	f.run(inContext(c.ID, "x = 1"))
	if code, b := f.status(http.MethodPost, "/contexts/"+c.ID+"/restart", nil); code != http.StatusNoContent {
		t.Fatalf("restart: %d %s", code, b)
	}
	msgs := f.run(inContext(c.ID, "x"))
	mustError(t, msgs, "NameError")
	if n := ofType(msgs, "number_of_executions"); n[0]["execution_count"] != float64(1) {
		t.Fatalf("execution_count after restart = %v, want 1", n[0]["execution_count"])
	}
}

func TestContextsIndependent(t *testing.T) {
	f := newFixture(t)
	sub := t.TempDir()
	a := f.newContext(map[string]any{"language": "python", "cwd": sub})
	b := f.newContext(map[string]any{})
	if a.Language != "python" || a.Cwd != sub || b.Cwd != f.cwd {
		t.Fatalf("contexts = %+v %+v", a, b)
	}
	f.run(inContext(a.ID, "x = 'in a'"))
	mustError(t, f.run(inContext(b.ID, "x")), "NameError")
	mustError(t, f.run(code("x")), "NameError") // the default context
	if got := mainText(t, f.run(inContext(a.ID, "x"))); got != "in a" {
		t.Fatalf("a.x = %q", got)
	}
	if got := mainText(t, f.run(inContext(a.ID, "import os; os.getcwd()"))); got != sub {
		t.Fatalf("cwd of a = %q, want %q", got, sub)
	}
	_, list := f.status(http.MethodGet, "/contexts", nil)
	for _, id := range []string{a.ID, b.ID} {
		if !strings.Contains(list, id) {
			t.Fatalf("GET /contexts = %s, missing %s", list, id)
		}
	}
	if code, _ := f.status(http.MethodDelete, "/contexts/"+a.ID, nil); code != http.StatusNoContent {
		t.Fatalf("delete: %d", code)
	}
	if code, _ := f.status(http.MethodPost, "/execute", inContext(a.ID, "1")); code != http.StatusNotFound {
		t.Fatalf("execute in deleted context: %d", code)
	}
}

func TestRichResults(t *testing.T) {
	f := newFixture(t)
	msgs := f.run(code(`
class H:
    def _repr_html_(self): return "<b>hi</b>"
    def _repr_png_(self): return b"\x89PNG"
    def _repr_json_(self): return {"a": 1}
    def __repr__(self): return "H()"
display("shown")
H()`))
	res := ofType(msgs, "result")
	if len(res) != 2 || res[0]["is_main_result"] != false || res[0].str("text") != "shown" {
		t.Fatalf("want a display result then the main result, got %v", res)
	}
	m := res[1]
	png, _ := base64.StdEncoding.DecodeString(m.str("png"))
	j, _ := m["json"].(map[string]any)
	if m.str("html") != "<b>hi</b>" || m.str("text") != "H()" || string(png) != "\x89PNG" || j["a"] != float64(1) {
		t.Fatalf("main result = %v", m)
	}
}

func TestEnvVarsOnlyDuringCall(t *testing.T) {
	f := newFixture(t)
	get := "import os; str(os.environ.get('FOO'))"
	msgs := f.run(map[string]any{"code": get, "env_vars": map[string]string{"FOO": "bar"}})
	if got := mainText(t, msgs); got != "bar" {
		t.Fatalf("FOO during call = %q", got)
	}
	if got := mainText(t, f.run(code(get))); got != "None" {
		t.Fatalf("FOO after call = %q", got)
	}
	if got := mainText(t, f.run(code("os.environ['SANDLOT_TEST_GLOBAL']"))); got != "from-sandbox" {
		t.Fatalf("sandbox env = %q", got)
	}
}

func TestUnknownContext(t *testing.T) {
	f := newFixture(t)
	if code, b := f.status(http.MethodPost, "/execute", inContext("nope", "1")); code != http.StatusNotFound || !strings.Contains(b, "nope") {
		t.Fatalf("execute: %d %q", code, b)
	}
	if code, _ := f.status(http.MethodPost, "/contexts/nope/restart", nil); code != http.StatusNotFound {
		t.Fatalf("restart: %d", code)
	}
	if code, _ := f.status(http.MethodDelete, "/contexts/nope", nil); code != http.StatusNotFound {
		t.Fatalf("delete: %d", code)
	}
}

func TestBadRequests(t *testing.T) {
	f := newFixture(t)
	cases := []struct {
		path, body, want string
	}{
		{"/execute", `{"code":`, "invalid JSON"},
		{"/execute", `{}`, `"code" is required`},
		{"/execute", `{"code":"1","language":"java"}`, "python, javascript (js), typescript (ts) and bash"},
		{"/execute", `{"code":"1","context_id":"x","language":"python"}`, "only one of"},
		{"/execute", `{"code":"1","env_vars":{"A=B":"1"}}`, "invalid variable name"},
		{"/contexts", `{"language":"r"}`, `"r"`},
		{"/contexts", `{"cwd":"/does/not/exist"}`, "/does/not/exist"},
		{"/contexts", `[1]`, "invalid JSON"},
	}
	for _, c := range cases {
		code, b := f.status(http.MethodPost, c.path, c.body)
		if code != http.StatusBadRequest || !strings.Contains(b, c.want) {
			t.Errorf("POST %s %s = %d %q, want 400 containing %q", c.path, c.body, code, b, c.want)
		}
	}
	if code, b := f.status(http.MethodGet, "/health", nil); code != http.StatusOK {
		t.Fatalf("health: %d %s", code, b)
	}
}

func TestOutputStreamsLive(t *testing.T) {
	f := newFixture(t)
	start := time.Now()
	var first time.Duration
	msgs, _ := f.runCtx(context.Background(),
		code("import time\nfor i in range(4):\n    print(i)\n    time.sleep(0.3)"),
		func(m msg) bool {
			if m.str("type") == "stdout" && first == 0 {
				first = time.Since(start)
			}
			return true
		})
	total := time.Since(start)
	if got := stdout(msgs); got != "0\n1\n2\n3\n" {
		t.Fatalf("stdout = %q", got)
	}
	if first == 0 || first > total-600*time.Millisecond {
		t.Fatalf("first line after %v of %v: output is not streamed", first, total)
	}
}

func TestClientDisconnectInterrupts(t *testing.T) {
	f := newFixture(t)
	f.run(code("x = 5"))
	for _, loop := range []string{"while True:\n    pass", "import time\nwhile True:\n    time.sleep(0.05)"} {
		ctx, cancel := context.WithCancel(context.Background())
		_, _ = f.runCtx(ctx, code("print('started', flush=True)\n"+loop), func(m msg) bool {
			if m.str("type") == "stdout" {
				cancel()
			}
			return true
		})
		cancel()
		start := time.Now()
		if got := mainText(t, f.run(code("x"))); got != "5" {
			t.Fatalf("state lost after interrupt: %q", got)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("next execution waited %v", d)
		}
	}
}

func TestKernelDeath(t *testing.T) {
	f := newFixture(t)
	e := mustError(t, f.run(code("import os\nos._exit(3)")), "KernelDied")
	if !strings.Contains(e.str("value"), "exit status 3") {
		t.Fatalf("value = %q", e.str("value"))
	}
	if got := mainText(t, f.run(code("1"))); got != "1" {
		t.Fatalf("after death: %q", got)
	}
	// Dying while idle: the next execution runs in a new kernel and says so.
	f.run(code("import os, threading\nthreading.Timer(0.1, lambda: os._exit(0)).start()"))
	time.Sleep(500 * time.Millisecond)
	msgs := f.run(code("2"))
	if got := mainText(t, msgs); got != "2" || len(ofType(msgs, "stderr")) != 1 {
		t.Fatalf("after idle death: %v", msgs)
	}
}

func TestExecutionsAreSerialized(t *testing.T) {
	f := newFixture(t)
	f.run(code("import time\nlog = []"))
	var wg sync.WaitGroup
	for _, c := range []string{"log.append('a1'); time.sleep(0.4); log.append('a2')", "log.append('b')"} {
		wg.Add(1)
		go func() { defer wg.Done(); f.run(code(c)) }()
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()
	if got := mainText(t, f.run(code("','.join(log)"))); got != "a1,a2,b" {
		t.Fatalf("log = %q, want a1,a2,b", got)
	}
}

func TestNewWithoutPython(t *testing.T) {
	_, err := New(Config{Python: "/nonexistent/python3"})
	if err == nil || !strings.Contains(err.Error(), "install python3") {
		t.Fatalf("err = %v", err)
	}
}

func TestRestartDuringExecution(t *testing.T) {
	f := newFixture(t)
	c := f.newContext(nil)
	done := make(chan []msg)
	go func() {
		msgs, _ := f.runCtx(context.Background(), inContext(c.ID, "print('go', flush=True)\nimport time\ntime.sleep(30)"), nil)
		done <- msgs
	}()
	time.Sleep(300 * time.Millisecond)
	if code, b := f.status(http.MethodPost, "/contexts/"+c.ID+"/restart", nil); code != http.StatusNoContent {
		t.Fatalf("restart: %d %s", code, b)
	}
	select {
	case msgs := <-done:
		mustError(t, msgs, reasonRestart)
	case <-time.After(5 * time.Second):
		t.Fatal("running execution did not end on restart")
	}
	if got := mainText(t, f.run(inContext(c.ID, "7"))); got != "7" {
		t.Fatalf("after restart: %q", got)
	}
}

func TestKernelStartFailure(t *testing.T) {
	t.Parallel()
	s, err := New(Config{Python: testPython(t), Cwd: "/does/not/exist"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f := &fixture{t: t, srv: s}
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	f.url = ts.URL
	e := mustError(t, f.run(code("1")), "KernelError")
	if !strings.Contains(e.str("value"), "/does/not/exist") {
		t.Fatalf("value = %q", e.str("value"))
	}
	if code, b := f.status(http.MethodPost, "/contexts", nil); code != http.StatusInternalServerError {
		t.Fatalf("create context: %d %s", code, b)
	}
}

func TestMatplotlibFiguresAreDisplayed(t *testing.T) {
	f := newFixture(t)
	needModule(t, "matplotlib")
	msgs := f.run(code("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\nprint('after')"))
	res := ofType(msgs, "result")
	if len(res) != 1 || res[0].str("png") == "" || res[0]["is_main_result"] != false || stdout(msgs) != "after\n" {
		t.Fatalf("want one png display result, got %v", msgs)
	}
}

// needModule fails (not skips) when the test's Python lacks a module
// Debian packages as python3-<module> (hack/deps.sh installs them).
func needModule(t *testing.T, module string) {
	t.Helper()
	if err := exec.Command(testPython(t), "-c", "import "+module).Run(); err != nil {
		t.Fatalf("%s is not installed for %s: apt-get install python3-%s", module, testPython(t), module)
	}
}

func TestDataFrameIsATable(t *testing.T) {
	f := newFixture(t)
	needModule(t, "pandas")
	msgs := f.run(code("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', None]})"))
	res := ofType(msgs, "result")
	if len(res) != 1 || !strings.Contains(res[0].str("html"), "<table") {
		t.Fatalf("want one result with an html table, got %v", msgs)
	}
	data, _ := res[0]["data"].(map[string]any)
	if a, _ := data["a"].([]any); len(a) != 2 || a[1] != float64(2) {
		t.Fatalf("data = %v, want column a = [1 2]", res[0]["data"])
	}
	if b, _ := data["b"].([]any); len(b) != 2 || b[1] != nil {
		t.Fatalf("data = %v, want column b = [x null]", res[0]["data"])
	}
}
