package sandboxfs

import (
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMetadataRoundTrip: what SetMetadata puts on a file Metadata reads
// back, and a file without any reads as nil.
func TestMetadataRoundTrip(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if md, err := Metadata(f.Name()); err != nil || md != nil {
		t.Fatalf("a new file's metadata: %v, %v; want none", md, err)
	}
	want := map[string]string{"owner": "team a", "k": ""}
	if err := SetMetadata(f, want); err != nil {
		t.Fatal(err)
	}
	if got, err := Metadata(f.Name()); err != nil || !maps.Equal(got, want) {
		t.Fatalf("metadata %v (%v), want %v", got, err, want)
	}
}

// TestMetadataFromHeader: keys lowercased, the first of repeated values,
// other headers ignored; what envd refuses is refused.
func TestMetadataFromHeader(t *testing.T) {
	h := http.Header{}
	h.Add("X-Metadata-Owner", "a")
	h.Add("X-Metadata-Owner", "b")
	h.Add("Content-Type", "text/plain")
	md, err := MetadataFromHeader(h)
	if err != nil || !maps.Equal(md, map[string]string{"owner": "a"}) {
		t.Fatalf("got %v, %v", md, err)
	}
	for name, bad := range map[string]map[string]string{
		"a long key":      {strings.Repeat("k", MaxMetadataKey+1): "v"},
		"a control byte":  {"k": "a\x01"},
		"a non-ASCII key": {"clé": "v"},
		"too much":        {"a": strings.Repeat("v", MaxMetadataSize)},
	} {
		if err := ValidateMetadata(bad); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
