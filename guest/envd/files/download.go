package files

import (
	"compress/gzip"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/sandlot-dev/sandlot/guest/sandboxfs"
)

// download serves GET /files?path=: the file's bytes, gzip-encoded when
// the client accepts it.
func (h *handler) download(w http.ResponseWriter, r *http.Request) error {
	if err := h.authorize(r, opRead); err != nil {
		return err
	}
	u, err := h.user(r)
	if err != nil {
		return err
	}
	t, err := h.resolve(r.URL.Query().Get("path"), u)
	if err != nil {
		return err
	}
	// Stat before opening: opening a FIFO would block until a writer comes.
	fi, err := os.Stat(t.host)
	if err != nil {
		return openError(t, err)
	}
	if fi.IsDir() {
		return statusf(http.StatusBadRequest, "path %s is a directory", t.sandbox)
	}
	if !fi.Mode().IsRegular() {
		return statusf(http.StatusBadRequest, "path %s is not a regular file", t.sandbox)
	}
	useGzip, err := negotiate(r)
	if err != nil {
		return err
	}
	f, err := os.Open(t.host)
	if err != nil {
		return openError(t, err)
	}
	defer f.Close()
	w.Header().Set("Vary", "Accept-Encoding")
	w.Header().Set("Content-Type", "application/octet-stream")
	if !useGzip {
		// ServeContent adds Content-Length, ranges and conditional GETs.
		http.ServeContent(w, r, "", fi.ModTime(), f)
		return nil
	}
	w.Header().Set("Content-Encoding", "gzip")
	gz, _ := gzip.NewWriterLevel(w, gzip.BestSpeed) // a valid level never fails
	// Once the status is out an error can only cut the stream short; the
	// client's gzip reader then fails on the missing trailer.
	if _, err := io.Copy(gz, f); err == nil {
		_ = gz.Close()
	}
	return nil
}

func openError(t target, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return statusf(http.StatusNotFound, "path %s does not exist", t.sandbox)
	case errors.Is(err, fs.ErrPermission):
		return statusf(http.StatusForbidden, "path %s: permission denied", t.sandbox)
	}
	return statusf(http.StatusInternalServerError, "opening %s: %v", t.sandbox, sandboxfs.BareError(err))
}

// negotiate reads Accept-Encoding: gzip when it is acceptable, identity
// otherwise, 406 when the client refuses both. HEAD, range and
// conditional requests get identity so ServeContent can answer them.
func negotiate(r *http.Request) (bool, error) {
	header := r.Header.Get("Accept-Encoding")
	if header == "" || r.Method == http.MethodHead || r.Header.Get("Range") != "" || r.Header.Get("If-Modified-Since") != "" ||
		r.Header.Get("If-None-Match") != "" || r.Header.Get("If-Range") != "" {
		return false, nil
	}
	q := map[string]float64{}
	for _, item := range strings.Split(header, ",") {
		name, quality := parseCoding(item)
		q[name] = quality
	}
	if q["gzip"] > 0 || q["x-gzip"] > 0 {
		return true, nil
	}
	identity, listed := q["identity"]
	if !listed {
		identity, listed = q["*"]
	}
	if !listed || identity > 0 {
		return false, nil
	}
	if star, ok := q["*"]; ok && star > 0 {
		return true, nil // identity refused, anything else welcome
	}
	return false, statusf(http.StatusNotAcceptable, "no acceptable encoding found, supported: [identity, gzip]")
}

// parseCoding splits "gzip;q=0.5" into its lower-cased name and quality.
func parseCoding(item string) (string, float64) {
	name, params, _ := strings.Cut(item, ";")
	quality := 1.0
	for _, p := range strings.Split(params, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
		if ok && strings.EqualFold(k, "q") {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				quality = f
			}
		}
	}
	return strings.ToLower(strings.TrimSpace(name)), quality
}
