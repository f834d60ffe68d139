package install

import (
	"fmt"
	"path/filepath"
	"strings"
)

// Imports tells whether containerd's main config (its text, read from
// mainPath) loads dropIn through its top-level `imports`, resolved the
// way containerd 2.x does (relative to the main config's directory, a
// glob when it holds a *). containerd reads drop-ins only through a
// config that imports them, so a drop-in nothing imports would be
// written, containerd restarted, and the runtime still missing.
func Imports(mainConfig []byte, mainPath, dropIn string) (bool, error) {
	list, err := importsOf(string(mainConfig))
	if err != nil {
		return false, fmt.Errorf("containerd config %s: %w", mainPath, err)
	}
	for _, imp := range list {
		p := filepath.Clean(imp)
		if !filepath.IsAbs(p) {
			p = filepath.Join(filepath.Dir(mainPath), p)
		}
		if !strings.Contains(p, "*") {
			if p == filepath.Clean(dropIn) {
				return true, nil
			}
			continue
		}
		ok, err := filepath.Match(p, dropIn)
		if err != nil {
			return false, fmt.Errorf("containerd config %s: import %q: %w", mainPath, imp, err)
		}
		if ok {
			return true, nil
		}
	}
	return false, nil
}

// importsOf finds the top-level `imports = [...]` (before the first
// table) and returns its strings. Only what containerd's configs use is
// understood: one array of strings, literal or basic, over any lines,
// with comments.
func importsOf(text string) ([]string, error) {
	rest := ""
	for i, line := range strings.Split(text, "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "[") {
			return nil, nil // tables start: no top-level imports
		}
		key, val, ok := strings.Cut(t, "=")
		if ok && strings.TrimSpace(key) == "imports" {
			rest = strings.Join(append([]string{val}, strings.Split(text, "\n")[i+1:]...), "\n")
			break
		}
	}
	if rest == "" {
		return nil, nil
	}
	return parseStringArray(rest)
}

// parseStringArray reads a TOML array of strings from the start of s.
func parseStringArray(s string) ([]string, error) {
	s = strings.TrimLeft(s, " \t")
	if !strings.HasPrefix(s, "[") {
		return nil, fmt.Errorf("imports: want an array, got %q", firstLine(s))
	}
	var out []string
	for i := 1; i < len(s); i++ {
		switch c := s[i]; c {
		case ' ', '\t', '\r', '\n', ',':
		case '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case ']':
			return out, nil
		case '\'', '"':
			str, n, err := tomlString(s[i:])
			if err != nil {
				return nil, err
			}
			out, i = append(out, str), i+n-1
		default:
			return nil, fmt.Errorf("imports: unexpected %q", firstLine(s[i:]))
		}
	}
	return nil, fmt.Errorf("imports: unterminated array")
}

// tomlString reads one TOML string starting at s[0] (a quote) and
// returns it and the bytes it took.
func tomlString(s string) (string, int, error) {
	quote := s[0]
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == quote:
			return b.String(), i + 1, nil
		case c == '\n':
			return "", 0, fmt.Errorf("imports: unterminated string %q", firstLine(s))
		case c == '\\' && quote == '"' && i+1 < len(s):
			i++
			b.WriteByte(s[i]) // \" and \\: the only escapes a path needs
		default:
			b.WriteByte(c)
		}
	}
	return "", 0, fmt.Errorf("imports: unterminated string %q", firstLine(s))
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
