package files

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strings"

	"github.com/sandlot-dev/sandlot/guest/sandboxfs"
)

// uploaded is one entry of the upload reply.
type uploaded struct {
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Path     string            `json:"path"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// errTooLarge is the decoded body running past MaxUpload.
var errTooLarge = errors.New("upload too large")

// upload serves POST /files: every file is streamed to disk, never held
// in memory, and appears under its name only once complete.
func (h *handler) upload(w http.ResponseWriter, r *http.Request) error {
	if err := h.authorize(r, opWrite); err != nil {
		return err
	}
	u, err := h.user(r)
	if err != nil {
		return err
	}
	md, err := sandboxfs.MetadataFromHeader(r.Header)
	if err != nil {
		return statusf(http.StatusBadRequest, "%v", err)
	}
	body, err := h.body(w, r)
	if err != nil {
		return err
	}
	defer body.Close()
	mediaType, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var done []uploaded
	switch {
	case err != nil && r.Header.Get("Content-Type") != "":
		return statusf(http.StatusBadRequest, "invalid Content-Type: %v", err)
	case mediaType == "application/octet-stream":
		done, err = h.uploadRaw(r, body, u, md)
	case strings.HasPrefix(mediaType, "multipart/"):
		done, err = h.uploadMultipart(r, body, params["boundary"], u, md)
	default:
		return statusf(http.StatusBadRequest, "unsupported Content-Type %q: expected multipart/form-data or application/octet-stream", mediaType)
	}
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(done) // the status is out: a failed write has no one to tell
	return nil
}

// body is the request body, gzip-decoded if so encoded, and cut off at
// MaxUpload both before decoding and after (a small gzip body can
// inflate without bound).
func (h *handler) body(w http.ResponseWriter, r *http.Request) (io.ReadCloser, error) {
	limit := h.cfg.MaxUpload
	if limit > 0 && r.ContentLength > limit {
		return nil, tooLarge(limit)
	}
	raw := r.Body
	if limit > 0 {
		raw = http.MaxBytesReader(w, r.Body, limit)
	}
	var decoded io.ReadCloser = raw
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip", "x-gzip":
		gz, err := gzip.NewReader(raw)
		if err != nil {
			return nil, readFailure(err, limit)
		}
		decoded = gz
	default:
		return nil, statusf(http.StatusBadRequest, "unsupported Content-Encoding %q, supported: [identity, gzip]", enc)
	}
	if limit <= 0 {
		return decoded, nil
	}
	return &limited{ReadCloser: decoded, left: limit}, nil
}

// limited fails with errTooLarge once more than left bytes were read.
type limited struct {
	io.ReadCloser
	left int64
}

func (l *limited) Read(p []byte) (int, error) {
	if l.left < 0 {
		return 0, errTooLarge
	}
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1]
	}
	n, err := l.ReadCloser.Read(p)
	l.left -= int64(n)
	if l.left < 0 {
		return n, errTooLarge
	}
	return n, err
}

func tooLarge(limit int64) error {
	return statusf(http.StatusRequestEntityTooLarge, "upload exceeds the limit of %d bytes", limit)
}

// readFailure answers a failure to read the request body: too large, or
// malformed (bad gzip, bad multipart, a truncated body).
func readFailure(err error, limit int64) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) || errors.Is(err, errTooLarge) {
		return tooLarge(limit)
	}
	return statusf(http.StatusBadRequest, "reading the request body: %v", err)
}

// uploadRaw writes an application/octet-stream body to ?path=.
func (h *handler) uploadRaw(r *http.Request, body io.Reader, u sandboxfs.User, md map[string]string) ([]uploaded, error) {
	p := r.URL.Query().Get("path")
	if p == "" {
		return nil, statusf(http.StatusBadRequest, "path query parameter is required for a raw body upload")
	}
	t, err := h.resolve(p, u)
	if err != nil {
		return nil, err
	}
	if err := h.writeFile(t, body, u, md); err != nil {
		return nil, err
	}
	return []uploaded{entryOf(t, md)}, nil
}

// uploadMultipart writes every part named "file": to ?path= when given
// (then one part only), else to the part's filename, which carries the
// whole destination path. Every file gets the same metadata.
func (h *handler) uploadMultipart(r *http.Request, body io.Reader, boundary string, u sandboxfs.User, md map[string]string) ([]uploaded, error) {
	if boundary == "" {
		return nil, statusf(http.StatusBadRequest, "multipart Content-Type has no boundary")
	}
	mr := multipart.NewReader(body, boundary)
	done := []uploaded{}
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, readFailure(err, h.cfg.MaxUpload)
		}
		if part.FormName() != "file" {
			continue // NextPart skips the rest of it
		}
		t, err := h.partTarget(r, part, u, done)
		if err != nil {
			return nil, err
		}
		if err := h.writeFile(t, part, u, md); err != nil {
			return nil, err
		}
		done = append(done, entryOf(t, md))
	}
	if len(done) == 0 {
		return nil, statusf(http.StatusBadRequest, "multipart body has no part named \"file\"")
	}
	return done, nil
}

// partTarget is where a part goes; two parts for one path are refused,
// as the second would silently replace the first.
func (h *handler) partTarget(r *http.Request, part *multipart.Part, u sandboxfs.User, done []uploaded) (target, error) {
	dest := r.URL.Query().Get("path")
	if dest == "" {
		dest = rawFilename(part)
	}
	if dest == "" {
		return target{}, statusf(http.StatusBadRequest, "file part has no filename and the path query parameter is absent")
	}
	t, err := h.resolve(dest, u)
	if err != nil {
		return target{}, err
	}
	for _, d := range done {
		if d.Path == t.sandbox {
			return target{}, statusf(http.StatusBadRequest, "more than one file for path %s in one upload", t.sandbox)
		}
	}
	return t, nil
}

// rawFilename is the part's filename as sent: Part.FileName keeps only
// the base name, but the SDK puts the whole destination path there.
func rawFilename(part *multipart.Part) string {
	_, params, err := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
	if err != nil {
		return ""
	}
	return params["filename"]
}

func entryOf(t target, md map[string]string) uploaded {
	if len(md) == 0 {
		md = nil
	}
	return uploaded{Name: path.Base(t.sandbox), Type: "file", Path: t.sandbox, Metadata: md}
}
