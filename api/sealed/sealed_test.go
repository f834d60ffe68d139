package sealed

import (
	"bytes"
	"errors"
	"testing"
)

func TestSealOpen(t *testing.T) {
	k, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte(`{"token":"t0k3n"}`)
	box, err := Seal(k.Public(), "ns/pod sbx", msg)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(box, []byte("t0k3n")) {
		t.Fatal("the sealed value holds the plaintext")
	}
	raw, err := k.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseKey(raw) // as the agent reads it back after a restart
	if err != nil {
		t.Fatal(err)
	}
	got, err := again.Open("ns/pod sbx", box)
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("Open = %q, %v; want %q", got, err, msg)
	}
	tampered := bytes.Clone(box)
	tampered[len(tampered)-1] ^= 1
	for name, open := range map[string]func() ([]byte, error){
		"another node's key": func() ([]byte, error) { return other.Open("ns/pod sbx", box) },
		"another pod":        func() ([]byte, error) { return k.Open("ns/pod2 sbx", box) },
		"altered":            func() ([]byte, error) { return k.Open("ns/pod sbx", tampered) },
		"truncated":          func() ([]byte, error) { return k.Open("ns/pod sbx", box[:10]) },
	} {
		if out, err := open(); !errors.Is(err, ErrNotForThisKey) || out != nil {
			t.Errorf("%s: Open = %q, %v; want ErrNotForThisKey", name, out, err)
		}
	}
	if _, err := Seal([]byte("short"), "ctx", msg); err == nil {
		t.Error("Seal to a malformed public key succeeded")
	}
}
