package e2b

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// Build-file uploads are bounded per team: each is a ConfigMap of up to
// maxFilesBytes in the team's namespace, and etcd is the whole cluster's.
// A team keeps at most Config.MaxBuildFiles of them and
// Config.MaxBuildFilesBytes of their bytes, has at most
// Config.MaxPendingBuilds builds requested and not started (each a small
// ConfigMap, buildrequest.go), and asks for upload links and uploads at
// Config.UploadRate. Over a bound is a 429 naming it.

// The default bounds (sandlot-api's flags of the same names).
const (
	DefaultMaxBuildFiles      = 64
	DefaultMaxBuildFilesBytes = 64 << 20
	DefaultMaxPendingBuilds   = 64
)

// AnnotationFilesBytes on a build-files ConfigMap is the size of its tar,
// so that the byte cap is counted from a metadata-only list (the data of
// 64 uploads is 57 MiB).
const AnnotationFilesBytes = "e2b.sandlot.dev/files-bytes"

// filesUsage is what a team's build files hold.
type filesUsage struct {
	count int
	bytes int64
	sizes map[string]int64 // by ConfigMap name
}

// filesLimits are a team's bounds on build files.
type filesLimits struct {
	files int
	bytes int64
}

// check refuses size more bytes of files in a ConfigMap named name, over
// what the team holds, when that passes a bound. A ConfigMap that exists
// (an upload again of the same hash) is replaced: its bytes are not counted
// twice, and it is not one more.
func (l filesLimits) check(used filesUsage, name string, size int64) *apiError {
	count, bytes := used.count+1, used.bytes+size
	if old, ok := used.sizes[name]; ok {
		count, bytes = used.count, used.bytes-old+size
	}
	// Each message says what frees room: a team does not see its ConfigMaps.
	const frees = "uploads go when the build they are for ends (unless it copies them) or %v after, " +
		"a template's with the template"
	if count > l.files {
		return errorf(http.StatusTooManyRequests, "build files: this team holds %d uploads, the limit (sandlot-api --max-build-files) "+
			"is %d; "+frees, used.count, l.files, buildFilesTTL)
	}
	if bytes > l.bytes {
		return errorf(http.StatusTooManyRequests, "build files: this team holds %d bytes of uploads and this one is %d, the limit "+
			"(sandlot-api --max-build-files-bytes) is %d bytes; "+frees, used.bytes, size, l.bytes, buildFilesTTL)
	}
	return nil
}

// filesSize is a build-files ConfigMap's size as its annotation says; one
// without it (written before the annotation was) counts as the most an
// upload may be.
func filesSize(m *metav1.PartialObjectMetadata) int64 {
	n, err := strconv.ParseInt(m.Annotations[AnnotationFilesBytes], 10, 64)
	if err != nil || n < 0 {
		return maxFilesBytes
	}
	return n
}

// configMapsMeta lists the metadata of the ConfigMaps of ns that have
// label: the API reads ConfigMaps past its cache (kube.go), and a
// metadata-only list does not carry the files.
func (k *Kube) configMapsMeta(ctx context.Context, ns, label string) ([]metav1.PartialObjectMetadata, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
	if err := k.List(ctx, list, client.InNamespace(ns), client.HasLabels{label}); err != nil {
		return nil, fmt.Errorf("list the ConfigMaps labelled %s in %s: %w", label, ns, err)
	}
	return list.Items, nil
}

// filesUsage is what the build files of team ns hold.
func (s *Server) filesUsage(ctx context.Context, ns string) (filesUsage, error) {
	items, err := s.kube.configMapsMeta(ctx, ns, sandlotv1.LabelBuildFiles)
	if err != nil {
		return filesUsage{}, err
	}
	used := filesUsage{count: len(items), sizes: make(map[string]int64, len(items))}
	for i := range items {
		n := filesSize(&items[i])
		used.bytes += n
		used.sizes[items[i].Name] = n
	}
	return used, nil
}

// checkFilesRoom refuses an upload of size bytes into ConfigMap name of
// team ns over the team's bounds (size 0: the link, before the size is
// known, is refused only when the team holds as many uploads as it may).
func (s *Server) checkFilesRoom(ctx context.Context, ns, name string, size int64) *apiError {
	used, err := s.filesUsage(ctx, ns)
	if err != nil {
		return kubeError("count the team's build files", err)
	}
	return filesLimits{files: s.cfg.MaxBuildFiles, bytes: s.cfg.MaxBuildFilesBytes}.check(used, name, size)
}

// teamLocks serialize a team's check of its bounds with the write it
// allows: two uploads at once would each see room for one. (Each replica
// of the API has its own: with n replicas a team may pass a bound by n-1.)
type teamLocks struct{ m sync.Map } // team → *sync.Mutex

func (l *teamLocks) of(team string) *sync.Mutex {
	mu, _ := l.m.LoadOrStore(team, &sync.Mutex{})
	return mu.(*sync.Mutex)
}

// setBuildFilesDefaults: the build-file bounds are never off (a team
// could fill etcd); the upload rate is, at 0, as the create rate is.
func (c *Config) setBuildFilesDefaults() {
	if c.MaxBuildFiles <= 0 {
		c.MaxBuildFiles = DefaultMaxBuildFiles
	}
	if c.MaxBuildFilesBytes <= 0 {
		c.MaxBuildFilesBytes = DefaultMaxBuildFilesBytes
	}
	if c.MaxPendingBuilds <= 0 {
		c.MaxPendingBuilds = DefaultMaxPendingBuilds
	}
	if c.UploadRate > 0 && c.UploadBurst < 1 {
		c.UploadBurst = max(1, int(math.Ceil(c.UploadRate)))
	}
}

// allowUpload charges an upload-link request or an upload to team (whose
// key or link signature was checked): a 429 with Retry-After, naming the
// limit, when its bucket is empty.
func (s *Server) allowUpload(w http.ResponseWriter, team string) *apiError {
	if secs := charge(w, s.uploads, team, 1); secs > 0 {
		return errorf(http.StatusTooManyRequests, "rate limit: a team may ask for %g upload links and uploads a second, %d at once "+
			"(sandlot-api --upload-rate, --upload-burst); retry in %d s", s.cfg.UploadRate, s.cfg.UploadBurst, secs)
	}
	return nil
}
