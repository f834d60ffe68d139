package interpreter

import (
	"context"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// needNode fails (not skips) without the runtimes the js/ts kernels use:
// the README's Node and Debian's node-typescript (hack/deps.sh installs it).
func needNode(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatal("node not found: install Node 20 (the README's prerequisites)")
	}
	if out, err := exec.Command("node", "-e", "require('/usr/share/nodejs/typescript')").CombinedOutput(); err != nil {
		t.Fatalf("TypeScript not found (apt-get install node-typescript, or run hack/deps.sh): %v\n%s", err, out)
	}
}

// TestLanguagesKeepState runs two cells in a context of each language: the
// second sees what the first defined, prints, and has a result; a third
// fails with the language's own error.
func TestLanguagesKeepState(t *testing.T) {
	needNode(t)
	f := newFixture(t)
	cases := []struct {
		lang, define, use, want, fail, errName string
	}{
		{"js", "let n = 40; const add = (a, b) => a + b;", "console.log('hi from js'); add(n, 2)", "42",
			"undefinedThing.x", "ReferenceError"},
		{"ts", "const n: number = 40;\nfunction add(a: number, b: number): number { return a + b }",
			"console.log('hi from ts'); add(n, 2)", "42", "let s: number = 'x' as any; s.toFixed(2)", "TypeError"},
		{"bash", "n=40; add() { echo $(( $1 + $2 )); }; cd /tmp", "echo hi from bash; add $n 2; pwd", "42\n/tmp\n",
			"echo partial; false", "ExitCode"},
	}
	for _, c := range cases {
		t.Run(c.lang, func(t *testing.T) {
			ctx := f.newContext(map[string]any{"language": c.lang})
			if want, _ := normalizeLanguage(c.lang); ctx.Language != want {
				t.Fatalf("context language = %q, want %q", ctx.Language, want)
			}
			if msgs := f.run(inContext(ctx.ID, c.define)); len(ofType(msgs, "error")) != 0 {
				t.Fatalf("define: %v", msgs)
			}
			msgs := f.run(inContext(ctx.ID, c.use))
			out := stdout(msgs)
			if !strings.Contains(out, "hi from "+c.lang) {
				t.Fatalf("stdout = %q, want the greeting", out)
			}
			if c.lang == "bash" {
				if !strings.HasSuffix(out, c.want) {
					t.Fatalf("bash stdout = %q, want it to end %q (state kept)", out, c.want)
				}
			} else if got := mainText(t, msgs); got != c.want {
				t.Fatalf("result = %q, want %q", got, c.want)
			}
			e := mustError(t, f.run(inContext(ctx.ID, c.fail)), c.errName)
			if e.str("value") == "" {
				t.Fatalf("error without a value: %v", e)
			}
		})
	}
}

// TestDefaultContextPerLanguage: runCode(code, {language}) without a
// context runs in that language's default context, which keeps state.
func TestDefaultContextPerLanguage(t *testing.T) {
	needNode(t)
	f := newFixture(t)
	f.run(map[string]any{"code": "globalThis.kept = 7", "language": "javascript"})
	f.run(map[string]any{"code": "kept = 'python'"})
	if got := mainText(t, f.run(map[string]any{"code": "kept * 6", "language": "js"})); got != "42" {
		t.Fatalf("js default context result = %q, want 42", got)
	}
	if got := mainText(t, f.run(code("kept"))); got != "python" {
		t.Fatalf("python default context result = %q, want python", got)
	}
}

// TestTopLevelAwaitAndEnv: a js cell may await; per-execution env applies
// to that cell only, in js and bash.
func TestTopLevelAwaitAndEnv(t *testing.T) {
	needNode(t)
	f := newFixture(t)
	js := f.newContext(map[string]any{"language": "javascript"})
	if got := mainText(t, f.run(inContext(js.ID, "await new Promise(r => setTimeout(() => r(5), 10))"))); got != "5" {
		t.Fatalf("awaited result = %q, want 5", got)
	}
	body := inContext(js.ID, "process.env.CELL_ONLY + ' ' + process.env.SANDLOT_TEST_GLOBAL")
	body["env_vars"] = map[string]string{"CELL_ONLY": "yes"}
	if got := mainText(t, f.run(body)); got != "yes from-sandbox" {
		t.Fatalf("env result = %q", got)
	}
	if got := mainText(t, f.run(inContext(js.ID, "String(process.env.CELL_ONLY)"))); got != "undefined" {
		t.Fatalf("CELL_ONLY leaked into the next cell: %q", got)
	}
	sh := f.newContext(map[string]any{"language": "bash"})
	body = inContext(sh.ID, "echo \"$CELL_ONLY $SANDLOT_TEST_GLOBAL\"")
	body["env_vars"] = map[string]string{"CELL_ONLY": "yes"}
	if got := stdout(f.run(body)); got != "yes from-sandbox\n" {
		t.Fatalf("bash env stdout = %q", got)
	}
	if got := stdout(f.run(inContext(sh.ID, "echo \"[${CELL_ONLY-unset}]\""))); got != "[unset]\n" {
		t.Fatalf("bash CELL_ONLY leaked: %q", got)
	}
	body = inContext(sh.ID, "echo x")
	body["env_vars"] = map[string]string{"A B": "1"}
	mustError(t, f.run(body), "ValueError")
}

// TestPythonShellLines: `!cmd` and `%pip` lines run as IPython runs them.
func TestPythonShellLines(t *testing.T) {
	f := newFixture(t)
	msgs := f.run(code("who = 'hi'\n!echo {who} from the shell\nif True:\n    !echo indented\n%pip --version\n1+1"))
	out := stdout(msgs)
	for _, want := range []string{"hi from the shell\n", "indented\n", "pip "} {
		if !strings.Contains(out, want) {
			t.Fatalf("stdout %q lacks %q (%v)", out, want, msgs)
		}
	}
	if got := mainText(t, msgs); got != "2" {
		t.Fatalf("result = %q, want 2", got)
	}
	if code, b := f.status(http.MethodPost, "/contexts", `{"language":"r"}`); code != http.StatusBadRequest ||
		!strings.Contains(b, "bash") {
		t.Fatalf("r context: %d %q, want 400 naming what runs", code, b)
	}
}

// TestInterruptOtherLanguages: a client that leaves interrupts a js busy
// loop with the context's state kept; a bash cell's commands are stopped
// and the next cell runs at once (in a new shell, told so).
func TestInterruptOtherLanguages(t *testing.T) {
	needNode(t)
	f := newFixture(t)
	cases := []struct{ lang, define, loop, check, want string }{
		{"js", "globalThis.x = 5", "console.log('started'); while (true) {}", "x", "5"},
		{"bash", "x=5", "echo started; sleep 60", "echo next", "next\n"},
	}
	for _, c := range cases {
		cc := f.newContext(map[string]any{"language": c.lang})
		f.run(inContext(cc.ID, c.define))
		ctx, cancel := context.WithCancel(context.Background())
		_, _ = f.runCtx(ctx, inContext(cc.ID, c.loop), func(m msg) bool {
			if m.str("type") == "stdout" {
				cancel()
			}
			return true
		})
		cancel()
		start := time.Now()
		msgs := f.run(inContext(cc.ID, c.check))
		got := stdout(msgs)
		if c.lang != "bash" {
			got = mainText(t, msgs)
		}
		if got != c.want {
			t.Fatalf("%s after interrupt: %q (%v), want %q", c.lang, got, msgs, c.want)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("%s: next execution waited %v", c.lang, d)
		}
	}
}
