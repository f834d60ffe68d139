package e2b

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// A COPY step's files: the SDK asks for an upload link per files hash and
// PUTs a (gzipped) tar there. The link is this API's own, signed with the
// asking key (HMAC), so the PUT needs no key of its own and only that
// team can write; the tar is kept in a ConfigMap of the team's namespace,
// which the node agent copies into the builder VM. Uploads are for a
// build the team requested (buildrequest.go), bounded per team
// (buildquota.go), and collected once no build needs them (buildsweep.go).

// uploadPrefix is the upload links' path; they are served before the key
// check (the signature is their key).
const uploadPrefix = "/_sandlot/uploads/"

// maxFilesBytes bounds one COPY step's tar: a ConfigMap holds 1 MiB.
const maxFilesBytes = 900 << 10

// uploadLinkTTL is how long an upload link may be used.
const uploadLinkTTL = time.Hour

var filesHash = regexp.MustCompile(`^[a-f0-9]{16,64}$`)

// fileUploadLink answers GET /templates/{id}/files/{hash}: only for a
// build the team awaits files for (buildrequest.go), within its bounds
// (buildquota.go).
func (s *Server) fileUploadLink(w http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	tpl, hash := r.PathValue("id"), r.PathValue("hash")
	if !templateName.MatchString(tpl) || !filesHash.MatchString(hash) {
		return 0, nil, errorf(http.StatusBadRequest, "template %q or files hash %q is malformed", tpl, hash)
	}
	ns := teamOf(r.Context())
	if aerr := s.allowUpload(w, ns); aerr != nil {
		return 0, nil, aerr
	}
	buildID, aerr := s.awaitedBuild(r.Context(), ns, tpl)
	if aerr != nil {
		return 0, nil, aerr
	}
	// Files are named by their hash: the SDK skips the upload of files
	// that are there, and they are kept for this build from now on.
	present, err := s.keepFiles(r.Context(), ns, hash, tpl, buildID)
	if err != nil {
		return 0, nil, kubeError("look up files "+hash, err)
	}
	if present {
		return http.StatusCreated, map[string]any{"present": true}, nil
	}
	if aerr := s.checkFilesRoom(r.Context(), ns, sandlotv1.BuildFilesName(hash), 0); aerr != nil {
		return 0, nil, aerr
	}
	// Signed with what the team's Secret stores for the caller's key (its
	// hash): a secret of the API's, which the caller cannot forge from
	// its key, gone when the key is.
	stored, aerr := s.storedKey(r.Context(), r.Header.Get("X-API-KEY"))
	if aerr != nil {
		return 0, nil, aerr
	}
	exp := strconv.FormatInt(s.now().Add(uploadLinkTTL).Unix(), 10)
	q := url.Values{"team": {ns}, "exp": {exp}, "sig": {uploadSignature(stored, ns, tpl, hash, exp)}}
	link := requestBase(r) + uploadPrefix + tpl + "/" + hash + "?" + q.Encode()
	return http.StatusCreated, map[string]any{"present": false, "url": link}, nil
}

// requestBase is the scheme and host the client reached this API at.
func requestBase(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

func uploadSignature(key, team, tpl, hash, exp string) string {
	m := hmac.New(sha256.New, []byte(key))
	fmt.Fprintf(m, "sandlot upload\n%s\n%s\n%s\n%s", team, tpl, hash, exp)
	return hex.EncodeToString(m.Sum(nil))
}

// serveUpload stores the files PUT to an upload link.
func (s *Server) serveUpload(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	code, err := s.upload(w, r)
	if err != nil {
		writeError(w, err)
		code = err.Code
	} else {
		w.WriteHeader(code)
	}
	observeRequest(r, code, time.Since(start))
}

func (s *Server) upload(w http.ResponseWriter, r *http.Request) (int, *apiError) {
	if r.Method != http.MethodPut {
		return 0, errorf(http.StatusMethodNotAllowed, "upload links take PUT")
	}
	tpl, hash, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, uploadPrefix), "/")
	q := r.URL.Query()
	team, exp := q.Get("team"), q.Get("exp")
	if aerr := s.checkUploadLink(r, team, tpl, hash, exp, q.Get("sig")); aerr != nil {
		return 0, aerr
	}
	// Charged once the signature holds: a stranger cannot spend a team's.
	if aerr := s.allowUpload(w, team); aerr != nil {
		return 0, aerr
	}
	// Again: the link may outlive the build it was asked for.
	buildID, aerr := s.awaitedBuild(r.Context(), team, tpl)
	if aerr != nil {
		return 0, aerr
	}
	data, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxFilesBytes))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return 0, errorf(http.StatusRequestEntityTooLarge, "the files of one COPY step are limited to %d KiB here (kept in a ConfigMap); "+
			"copy fewer files per step, or put large ones in the image", maxFilesBytes>>10)
	} else if err != nil {
		return 0, errorf(http.StatusBadRequest, "read the upload: %v", err)
	}
	if aerr := s.storeFiles(r.Context(), team, tpl, hash, buildID, data); aerr != nil {
		return 0, aerr
	}
	return http.StatusOK, nil
}

// storeFiles keeps data, the files of hash uploaded for build buildID of
// template tpl, in a ConfigMap of team's namespace, within the team's
// bounds; the files of that hash there already are replaced.
func (s *Server) storeFiles(ctx context.Context, team, tpl, hash, buildID string, data []byte) *apiError {
	mu := s.locks.of(team)
	mu.Lock()
	defer mu.Unlock()
	name := sandlotv1.BuildFilesName(hash)
	if aerr := s.checkFilesRoom(ctx, team, name, int64(len(data))); aerr != nil {
		return aerr
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: team,
		Labels: map[string]string{sandlotv1.LabelBuildFiles: tpl},
		Annotations: map[string]string{sandlotv1.AnnotationFilesHash: hash, AnnotationBuildID: buildID,
			AnnotationExpires: expiryStamp(s.now().Add(buildFilesTTL)), AnnotationFilesBytes: strconv.Itoa(len(data))}},
		BinaryData: map[string][]byte{sandlotv1.BuildFilesKey: data}}
	err := s.kube.Create(ctx, cm)
	if apierrors.IsAlreadyExists(err) {
		old := &corev1.ConfigMap{}
		if err := s.kube.Get(ctx, client.ObjectKeyFromObject(cm), old); err != nil {
			return kubeError("read files "+hash, err)
		}
		// Its owners (templates whose builds copy it) stay.
		old.Labels, old.Annotations, old.BinaryData, old.Data = cm.Labels, cm.Annotations, cm.BinaryData, nil
		err = s.kube.Update(ctx, old)
	}
	if err != nil {
		return kubeError("store files "+hash, err)
	}
	return nil
}

// checkUploadLink accepts a link this API signed, unexpired, with a key
// the team still has.
func (s *Server) checkUploadLink(r *http.Request, team, tpl, hash, exp, sig string) *apiError {
	deny := errorf(http.StatusForbidden, "this upload link is not valid (expired, or signed with a key that is gone); ask for another")
	until, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || s.now().Unix() > until || !templateName.MatchString(tpl) || !filesHash.MatchString(hash) ||
		!slices.Contains(s.cfg.Namespaces(), team) {
		return deny
	}
	sets, err := s.keySets(r.Context(), s.kube)
	if err != nil {
		return deny
	}
	ok := false
	for _, set := range sets {
		if set.team != team {
			continue
		}
		for _, v := range set.secret.Data {
			want := uploadSignature(strings.TrimSpace(string(v)), team, tpl, hash, exp)
			ok = hmac.Equal([]byte(want), []byte(sig)) || ok
		}
	}
	if !ok {
		return deny
	}
	return nil
}
