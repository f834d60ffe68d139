package interpreter

import (
	_ "embed"
	"fmt"
	"os/exec"
	"strings"
)

// The languages a context runs, as contexts report them. Each has its own
// kernel speaking kernel.py's protocol.
const (
	langPython     = "python"
	langJavaScript = "javascript"
	langTypeScript = "typescript"
	langBash       = "bash"
)

// languageNames maps what the SDK sends (the E2B server's names and
// aliases, any case) to a language; "" is python, as on E2B.
var languageNames = map[string]string{
	"": langPython, "python": langPython, "python3": langPython,
	"javascript": langJavaScript, "js": langJavaScript,
	"typescript": langTypeScript, "ts": langTypeScript,
	"bash": langBash,
}

// jsKernel runs javascript and typescript cells on node (kernel.js).
//
//go:embed kernel.js
var jsKernel string

// bashKernel drives one bash per context from python3 (kernel_bash.py).
//
//go:embed kernel_bash.py
var bashKernel string

// normalizeLanguage resolves a requested language, or says what runs.
func normalizeLanguage(lang string) (string, error) {
	if l, ok := languageNames[strings.ToLower(strings.TrimSpace(lang))]; ok {
		return l, nil
	}
	return "", fmt.Errorf("language %q is not supported: this sandbox's code interpreter runs "+
		"python, javascript (js), typescript (ts) and bash", lang)
}

// kernelCommand is the command line that starts a kernel for lang; it
// names the package to install when the image lacks the runtime.
func (s *Server) kernelCommand(lang string) ([]string, error) {
	switch lang {
	case langJavaScript, langTypeScript:
		node, err := exec.LookPath("node")
		if err != nil {
			return nil, fmt.Errorf("%s contexts need Node.js in the sandbox image (%w): use the code-interpreter "+
				"template's image, or install nodejs (and node-typescript for typescript)", lang, err)
		}
		argv := []string{node, "-e", jsKernel}
		if lang == langTypeScript {
			argv = append(argv, langTypeScript)
		}
		return argv, nil
	case langBash:
		if _, err := exec.LookPath("bash"); err != nil {
			return nil, fmt.Errorf("bash contexts need bash in the sandbox image (%w)", err)
		}
		return []string{s.python, "-u", "-c", bashKernel}, nil
	}
	return []string{s.python, "-u", "-c", kernelScript}, nil
}
