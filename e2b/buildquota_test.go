package e2b

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// The bounds on build files and the sweep's decisions, as pure functions.

func TestFilesLimits(t *testing.T) {
	lim := filesLimits{files: 3, bytes: 1000}
	used := filesUsage{count: 2, bytes: 900, sizes: map[string]int64{"a": 400, "b": 500}}
	full := filesUsage{count: 3, bytes: 900, sizes: map[string]int64{"a": 400, "b": 300, "c": 200}}
	tests := []struct {
		name string
		used filesUsage
		file string
		size int64
		want string // "": allowed; else what the 429 names
	}{
		{name: "room", used: used, file: "c", size: 100},
		{name: "the link, before the size", used: used, file: "c"},
		{name: "one byte over", used: used, file: "c", size: 101, want: "--max-build-files-bytes) is 1000 bytes"},
		{name: "one file over", used: full, file: "d", size: 1, want: "--max-build-files) is 3"},
		{name: "a link over the count", used: full, file: "d", want: "--max-build-files) is 3"},
		{name: "replacing is not one more", used: full, file: "a", size: 500},
		{name: "replacing counts the difference", used: used, file: "b", size: 600},
		{name: "replacing with more than fits", used: used, file: "b", size: 601, want: "--max-build-files-bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := lim.check(tc.used, tc.file, tc.size)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || err.Code != http.StatusTooManyRequests || !strings.Contains(err.Message, tc.want)):
				t.Fatalf("got %v, want a 429 naming %q", err, tc.want)
			}
		})
	}
}

func TestFilesSize(t *testing.T) {
	for ann, want := range map[string]int64{"123": 123, "0": 0, "": maxFilesBytes, "x": maxFilesBytes, "-1": maxFilesBytes} {
		m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationFilesBytes: ann}}}
		if ann == "" {
			m.Annotations = nil
		}
		if got := filesSize(m); got != want {
			t.Errorf("files-bytes %q: size %d, want %d", ann, got, want)
		}
	}
}

func TestCheckPendingBuilds(t *testing.T) {
	reqs := func(tpls ...string) []metav1.PartialObjectMetadata {
		var out []metav1.PartialObjectMetadata
		for _, tpl := range tpls {
			out = append(out, metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: buildRequestName(tpl)}})
		}
		return out
	}
	if err := checkPendingBuilds(reqs("a"), "b", 2); err != nil {
		t.Errorf("a second request under a bound of 2: %v", err)
	}
	if err := checkPendingBuilds(reqs("a", "b"), "b", 2); err != nil {
		t.Errorf("a template's request again (it replaces its own): %v", err)
	}
	err := checkPendingBuilds(reqs("a", "b"), "c", 2)
	if err == nil || err.Code != http.StatusTooManyRequests || !strings.Contains(err.Message, "--max-pending-builds) is 2") {
		t.Errorf("a third request under a bound of 2: %v, want a 429 naming the limit", err)
	}
}

func TestExpired(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for stamp, want := range map[string]bool{
		"":                                true, // written before expiries: lapsed
		"soon":                            true,
		expiryStamp(now.Add(time.Second)): false,
		expiryStamp(now):                  true,
		expiryStamp(now.Add(-time.Hour)):  true,
	} {
		if got := expired(map[string]string{AnnotationExpires: stamp}, now); got != want {
			t.Errorf("expires %q at %v: expired %v, want %v", stamp, now, got, want)
		}
	}
}

// buildTpl is a Template whose current build buildID copies the files of
// hashes and whose base is phase on its node ("" : not seen by the
// controller yet).
func buildTpl(name, buildID string, phase sandlotv1.BasePhase, hashes ...string) sandlotv1.Template {
	tpl := sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 2},
		Spec: sandlotv1.TemplateSpec{Build: &sandlotv1.TemplateBuild{ID: buildID}}}
	for _, h := range hashes {
		tpl.Spec.Build.Steps = append(tpl.Spec.Build.Steps, sandlotv1.BuildStep{Type: sandlotv1.StepCopy, FilesHash: h})
	}
	if phase != "" {
		setBase(&tpl, phase)
	}
	return tpl
}

// setBase plays the controller: tpl's current build has a base in phase.
func setBase(tpl *sandlotv1.Template, phase sandlotv1.BasePhase) {
	status, reason := metav1.ConditionFalse, sandlotv1.ReasonBuilding
	if phase == sandlotv1.BaseReady {
		status, reason = metav1.ConditionTrue, sandlotv1.ReasonBaseReady
	} else if phase == sandlotv1.BaseFailed {
		reason = sandlotv1.ReasonBuildFailed
	}
	tpl.Status = sandlotv1.TemplateStatus{ObservedGeneration: tpl.Generation, BaseRevision: "r1",
		BaseSnapshots: []sandlotv1.BaseSnapshot{{Node: "n1", Revision: "r1", Phase: phase, Snapshot: tpl.Name + "-base"}},
		Conditions: []metav1.Condition{{Type: sandlotv1.ConditionBaseSnapshotReady, Status: status, Reason: reason,
			ObservedGeneration: tpl.Generation, LastTransitionTime: metav1.Now()}}}
}

func TestBuildFilesCollectible(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	live, lapsed := expiryStamp(now.Add(time.Hour)), expiryStamp(now.Add(-time.Second))
	files := func(hash, tpl, buildID, expires string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: sandlotv1.BuildFilesName(hash),
			Labels:      map[string]string{sandlotv1.LabelBuildFiles: tpl},
			Annotations: map[string]string{AnnotationBuildID: buildID, AnnotationExpires: expires}}}
	}
	request := func(tpl, buildID, expires string) metav1.PartialObjectMetadata {
		return metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: buildRequestName(tpl),
			Labels: map[string]string{LabelBuildRequest: tpl}, Annotations: map[string]string{AnnotationBuildID: buildID, AnnotationExpires: expires}}}
	}
	deleting := buildTpl("gone", "b1", sandlotv1.BaseReady, "dd")
	deleting.DeletionTimestamp = &metav1.Time{Time: now}
	tpls := []sandlotv1.Template{buildTpl("app", "b1", sandlotv1.BaseReady, "aa"), buildTpl("run", "b2", ""),
		buildTpl("dep", "b3", sandlotv1.BaseBuilding), buildTpl("bad", "b4", sandlotv1.BaseFailed), deleting}
	reqs := []metav1.PartialObjectMetadata{request("new", "b5", live), request("old", "b6", lapsed), request("app", "b7", live)}
	seen := seenBuilds(tpls, reqs, now)
	tests := []struct {
		name  string
		files *metav1.PartialObjectMetadata
		want  bool
	}{
		{"copied by a template's build, lapsed", files("aa", "other", "x", lapsed), false},
		{"copied only by a template being deleted", files("dd", "gone", "b1", live), true},
		{"for a requested build", files("ee", "new", "b5", live), false},
		{"for a requested build, lapsed", files("ee", "new", "b5", lapsed), true},
		{"for a request that lapsed", files("ee", "old", "b6", live), true},
		{"for an earlier request of the template", files("ee", "new", "b0", live), true},
		{"for a build the controller has not seen", files("ee", "run", "b2", live), false},
		{"for a build running", files("ee", "dep", "b3", live), false},
		{"for a build running, lapsed", files("ee", "dep", "b3", lapsed), true},
		{"for a build that is ready, not copied", files("ee", "app", "b1", live), true},
		{"for a build that failed", files("ee", "bad", "b4", live), true},
		{"for the template's next build, requested", files("ee", "app", "b7", live), false},
		{"for a template that does not exist", files("ee", "ghost", "b9", live), true},
		{"without an expiry (before there were)", files("ee", "new", "b5", ""), true},
	}
	for _, tc := range tests {
		if got := seen.collectible(tc.files, now); got != tc.want {
			t.Errorf("%s: collectible %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestAllowUpload(t *testing.T) {
	now := time.Unix(1000, 0)
	s := &Server{cfg: Config{UploadRate: 0.5, UploadBurst: 2}}
	s.uploads = newCreateLimiter(s.cfg.UploadRate, s.cfg.UploadBurst, func() time.Time { return now })
	for i := range 2 {
		if err := s.allowUpload(httptest.NewRecorder(), "team-a"); err != nil {
			t.Fatalf("upload %d of a burst of 2: %v", i+1, err)
		}
	}
	w := httptest.NewRecorder()
	err := s.allowUpload(w, "team-a")
	if err == nil || err.Code != http.StatusTooManyRequests || !strings.Contains(err.Message, "--upload-rate") || w.Header().Get("Retry-After") != "2" {
		t.Fatalf("a third at once: %v, Retry-After %q; want a 429 naming the limit, retry in 2 s", err, w.Header().Get("Retry-After"))
	}
	if err := s.allowUpload(httptest.NewRecorder(), "team-b"); err != nil {
		t.Errorf("another team's bucket is its own: %v", err)
	}
	now = now.Add(2 * time.Second)
	if err := s.allowUpload(httptest.NewRecorder(), "team-a"); err != nil {
		t.Errorf("after 2 s at 0.5 a second: %v", err)
	}
}
