package e2b

import (
	"io"
	"strings"
	"testing"
)

// endless is a guest's answer that never ends: "[0,0,0,..." forever.
type endless struct{ n int }

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		switch {
		case e.n == 0:
			p[i] = '['
		case e.n%2 == 1:
			p[i] = '0'
		default:
			p[i] = ','
		}
		e.n++
	}
	return len(p), nil
}

// TestDecodeBounded: a guest's JSON answer is read up to the bound: an
// endless body is refused after it (not read on), a body over the bound
// too, and one within it decodes.
func TestDecodeBounded(t *testing.T) {
	var out []int
	body := &countingReader{r: &endless{}}
	if err := decodeBounded(body, 1<<20, "/metrics", &out); err == nil ||
		!strings.Contains(err.Error(), "more than 1048576 bytes") {
		t.Fatalf("an endless answer: %v, want refused at the bound", err)
	}
	if body.n > 1<<20+1 {
		t.Fatalf("read %d bytes of an endless answer, bound 1 MiB", body.n)
	}
	over := `{"cpuCount":1,"pad":"` + strings.Repeat("x", 2048) + `"}`
	var m map[string]any
	if err := decodeBounded(strings.NewReader(over), 1024, "/metrics", &m); err == nil {
		t.Fatal("an answer over the bound decoded")
	}
	if err := decodeBounded(strings.NewReader(`{"cpuCount":2}`), 1024, "/metrics", &m); err != nil || m["cpuCount"] != float64(2) {
		t.Fatalf("an answer within the bound: %v %v", m, err)
	}
	if err := decodeBounded(strings.NewReader(`{"cpuCount":`), 1024, "/metrics", &m); err == nil ||
		strings.Contains(err.Error(), "more than") {
		t.Fatalf("a truncated answer: %v, want a decode error", err)
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}
