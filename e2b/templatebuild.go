package e2b

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// Templates built through the E2B API (the SDK's Template().build()):
//
//	POST /v3/templates                          names the template, mints a build ID
//	GET  /templates/{id}/files/{hash}           a COPY step's upload link (buildfiles.go)
//	POST /v2/templates/{id}/builds/{buildID}    the steps: a Template with spec.build
//	GET  /templates/{id}/builds/{buildID}/status, /logs   (buildstatus.go)
//
// The Template's controller builds its base on each node: a builder VM
// boots the image, the node agent runs the steps through the guest agent,
// and the VM is snapshotted. The build ID carries the VM size asked for
// at the first call; the first call also records the build, until it
// starts, for the upload links between (buildrequest.go).

// templateName is what a template name must be: a DNS label (it is the
// Template's name and the templateID).
var templateName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// buildID is <16 hex>-<vcpu>x<memoryMiB>.
var buildIDPattern = regexp.MustCompile(`^[0-9a-f]{16}-([0-9]{1,3})x([0-9]{1,6})$`)

type buildRequestV3 struct {
	Name     string   `json:"name"`
	Alias    string   `json:"alias"`
	Tags     []string `json:"tags"`
	TeamID   string   `json:"teamID"`
	CPUCount int32    `json:"cpuCount"`
	MemoryMB int32    `json:"memoryMB"`
	MinFree  int32    `json:"minFreeDiskMb"`
}

// The VM sizes a build may ask for: the Template CRD's bounds.
const (
	maxVCPU      = 64
	minMemoryMiB = 64
	maxMemoryMiB = 262144
)

// requestBuild answers POST /v3/templates.
func (s *Server) requestBuild(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	var req buildRequestV3
	if err := decodeBody(r, &req); err != nil {
		return 0, nil, err
	}
	name := req.Name
	if name == "" {
		name = req.Alias
	}
	name, tag, _ := strings.Cut(name, ":")
	if tag != "" || len(req.Tags) > 0 {
		return 0, nil, errorf(http.StatusBadRequest, "tags on a build are not supported: build %q, then tag it "+
			"(Template.assignTags; sandlot keeps one build per template, and a tag names the build it had then)", name)
	}
	if !templateName.MatchString(name) {
		return 0, nil, errorf(http.StatusBadRequest, "template name %q must be a DNS label: lowercase letters, digits and '-', at most 63", name)
	}
	if req.TeamID != "" && req.TeamID != teamOf(r.Context()) {
		return 0, nil, errorf(http.StatusForbidden, "teamID %q is not this key's team", req.TeamID)
	}
	if aerr := s.checkBuildResources(req.CPUCount, req.MemoryMB); aerr != nil {
		return 0, nil, aerr
	}
	if req.MinFree != 0 {
		return 0, nil, errorf(http.StatusBadRequest, "minFreeDiskMb is not supported: a sandbox's writable layer is the template's spec.writableLayerMiB")
	}
	var raw [8]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return 0, nil, errorf(http.StatusInternalServerError, "draw a build ID: %v", err)
	}
	id := fmt.Sprintf("%s-%dx%d", hex.EncodeToString(raw[:]), req.CPUCount, req.MemoryMB)
	if aerr := s.recordBuildRequest(r.Context(), teamOf(r.Context()), name, id); aerr != nil {
		return 0, nil, aerr
	}
	return http.StatusAccepted, map[string]any{"templateID": name, "buildID": id, "public": false,
		"names": []string{name}, "aliases": []string{name}, "tags": []string{}}, nil
}

type buildStart struct {
	FromImage         string          `json:"fromImage"`
	FromTemplate      string          `json:"fromTemplate"`
	FromImageRegistry json.RawMessage `json:"fromImageRegistry"`
	Force             bool            `json:"force"`
	Steps             []buildStepJSON `json:"steps"`
	StartCmd          string          `json:"startCmd"`
	ReadyCmd          string          `json:"readyCmd"`
}

// buildStepJSON is a step as the SDKs send it: with forceUpload, which
// only tells the SDK to upload a COPY's files even when present here; it
// sets the step's force too, which is what the build acts on.
type buildStepJSON struct {
	sandlotv1.BuildStep
	ForceUpload *bool `json:"forceUpload,omitempty"`
}

// steps are the request's steps as the Template keeps them.
func (b buildStart) steps() []sandlotv1.BuildStep {
	out := make([]sandlotv1.BuildStep, 0, len(b.Steps))
	for _, st := range b.Steps {
		out = append(out, st.BuildStep)
	}
	return out
}

// startBuild answers POST /v2/templates/{id}/builds/{buildID}: the
// Template is created, or its spec replaced by this build.
func (s *Server) startBuild(w http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	name, buildID := r.PathValue("id"), r.PathValue("buildID")
	cpu, mem, ok := parseBuildID(buildID)
	if !ok || !templateName.MatchString(name) {
		return 0, nil, errorf(http.StatusNotFound, "build %q of template %q was not requested here (POST /v3/templates first)", buildID, name)
	}
	if err := s.allowOperation(w, r, "build"); err != nil {
		return 0, nil, err
	}
	var req buildStart
	if err := decodeBody(r, &req); err != nil {
		return 0, nil, err
	}
	spec, aerr := s.buildSpec(r, name, req)
	if aerr != nil {
		return 0, nil, aerr
	}
	if cpu > 0 {
		spec.Resources.VCPU = int32(cpu)
	}
	if mem > 0 {
		spec.Resources.MemoryMiB = int32(mem)
	}
	spec.Build.ID = buildID
	tpl, aerr := s.putTemplate(r, name, spec)
	if aerr != nil {
		return 0, nil, aerr
	}
	s.adoptBuildFiles(r.Context(), tpl)
	s.adoptRegistrySecret(r.Context(), tpl)
	s.consumeBuildRequest(r.Context(), tpl.Namespace, name, buildID)
	return http.StatusAccepted, nil, nil
}

// parseBuildID reads the VM size a build ID carries (0: the default);
// ok is false for an ID this API did not mint.
func parseBuildID(id string) (cpu, mem int, ok bool) {
	m := buildIDPattern.FindStringSubmatch(id)
	if m == nil {
		return 0, 0, false
	}
	cpu, _ = strconv.Atoi(m[1])
	mem, _ = strconv.Atoi(m[2])
	return cpu, mem, cpu <= maxVCPU && mem <= maxMemoryMiB && (mem == 0 || mem >= minMemoryMiB)
}

// buildSpec is the Template spec a build asks for.
func (s *Server) buildSpec(r *http.Request, name string, req buildStart) (sandlotv1.TemplateSpec, *apiError) {
	spec := sandlotv1.TemplateSpec{Resources: sandlotv1.Resources{VCPU: 1, MemoryMiB: 512}}
	steps := req.steps()
	switch {
	case len(req.FromImageRegistry) > 0 && string(req.FromImageRegistry) != "null" && req.FromImage == "":
		return spec, errorf(http.StatusBadRequest, "fromImageRegistry goes with fromImage: the credentials of its registry")
	case (req.FromImage == "") == (req.FromTemplate == ""):
		return spec, errorf(http.StatusBadRequest, "give exactly one of fromImage and fromTemplate")
	case req.FromTemplate != "":
		base, aerr := s.findTemplate(r, req.FromTemplate)
		if aerr != nil {
			return spec, errorf(http.StatusBadRequest, "fromTemplate %q: no such template of this team, nor a public one (%s)", req.FromTemplate, aerr.Message)
		}
		if base.Name == name && base.Namespace == teamOf(r.Context()) {
			return spec, errorf(http.StatusBadRequest, "a template cannot be built from itself")
		}
		if aerr := s.copyBuildFiles(r.Context(), base, teamOf(r.Context())); aerr != nil {
			return spec, aerr
		}
		// The base's image with its steps first: what its base snapshot
		// holds, rebuilt (sandlot does not stack snapshots of templates).
		spec.Image, spec.Env, spec.Resources = base.Spec.Image, base.Spec.Env, base.Spec.Resources
		if b := base.Spec.Build; b != nil {
			steps = append(append([]sandlotv1.BuildStep(nil), b.Steps...), steps...)
			if req.StartCmd == "" && req.ReadyCmd == "" {
				req.StartCmd, req.ReadyCmd = b.StartCmd, b.ReadyCmd
			}
		}
	default:
		spec.Image = req.FromImage
	}
	if err := s.checkSteps(r, steps); err != nil {
		return spec, err
	}
	if err := s.withRegistry(r, name, req.FromImageRegistry, &spec); err != nil {
		return spec, err
	}
	spec.Build = &sandlotv1.TemplateBuild{Steps: steps, StartCmd: req.StartCmd, ReadyCmd: req.ReadyCmd, Force: req.Force}
	return spec, nil
}

// checkSteps refuses what the builder would not run, by name, before a
// Template is written.
func (s *Server) checkSteps(r *http.Request, steps []sandlotv1.BuildStep) *apiError {
	for i, st := range steps {
		n := i + 1
		switch st.Type {
		case sandlotv1.StepRun, sandlotv1.StepWorkdir, sandlotv1.StepUser:
			if len(st.Args) == 0 || st.Args[0] == "" {
				return errorf(http.StatusBadRequest, "step %d: %s needs an argument", n, st.Type)
			}
		case sandlotv1.StepEnv:
			if len(st.Args) == 0 || len(st.Args)%2 != 0 {
				return errorf(http.StatusBadRequest, "step %d: ENV needs name, value pairs", n)
			}
		case sandlotv1.StepCopy:
			if len(st.Args) < 2 || !filesHash.MatchString(st.FilesHash) {
				return errorf(http.StatusBadRequest, "step %d: COPY needs src, dest and the filesHash of its upload", n)
			}
			// Kept a while again: not swept before the Template copies them.
			present, err := s.keepFiles(r.Context(), teamOf(r.Context()), st.FilesHash, "", "")
			if err != nil {
				return kubeError("look up files "+st.FilesHash, err)
			}
			if !present {
				return errorf(http.StatusBadRequest, "step %d: COPY %s: its files (%s) were not uploaded", n, st.Args[0], st.FilesHash)
			}
		default:
			return errorf(http.StatusBadRequest, "step %d: step type %q is not supported (RUN, COPY, ENV, WORKDIR, USER are)", n, st.Type)
		}
	}
	return nil
}

// putTemplate creates the template or replaces its image, size and build,
// keeping what else it has (warm pool, ports, timeout), and returns it.
func (s *Server) putTemplate(r *http.Request, name string, spec sandlotv1.TemplateSpec) (*sandlotv1.Template, *apiError) {
	ns := teamOf(r.Context())
	tpl := &sandlotv1.Template{}
	err := s.kube.direct.Get(r.Context(), client.ObjectKey{Namespace: ns, Name: name}, tpl) // the latest: an update of a stale one conflicts
	switch {
	case apierrors.IsNotFound(err):
		tpl = &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
		if err := s.kube.Create(r.Context(), tpl); err != nil {
			return nil, kubeError("create template "+name, err)
		}
		return tpl, nil
	case err != nil:
		return nil, kubeError("get template "+name, err)
	}
	tpl.Spec.Image, tpl.Spec.Resources, tpl.Spec.Build = spec.Image, spec.Resources, spec.Build
	if spec.ImagePullSecrets != nil { // a build without credentials keeps the template's
		tpl.Spec.ImagePullSecrets = spec.ImagePullSecrets
	}
	// A build makes a copy of a public template the team's own.
	delete(tpl.Annotations, AnnotationPublicSource)
	delete(tpl.Annotations, AnnotationPublicSpec)
	if spec.Env != nil {
		tpl.Spec.Env = spec.Env
	}
	if err := s.kube.Update(r.Context(), tpl); err != nil {
		return nil, kubeError("update template "+name, err)
	}
	return tpl, nil
}

// aliasExists answers GET /templates/aliases/{alias}.
func (s *Server) aliasExists(_ http.ResponseWriter, r *http.Request, alias string) (int, any, *apiError) {
	tpl, aerr := s.findTemplate(r, alias)
	if aerr != nil {
		return 0, nil, aerr
	}
	return http.StatusOK, map[string]any{"templateID": tpl.Name, "public": isPublic(tpl)}, nil
}

// checkBuildResources refuses a build's size outside a Template's bounds
// or above the operator's maximum, naming the limit.
func (s *Server) checkBuildResources(vcpu, memoryMiB int32) *apiError {
	maxCPU, maxMem := int32(maxVCPU), int32(maxMemoryMiB)
	if s.cfg.MaxBuildVCPU > 0 {
		maxCPU = min(maxCPU, s.cfg.MaxBuildVCPU)
	}
	if s.cfg.MaxBuildMemoryMiB > 0 {
		maxMem = min(maxMem, s.cfg.MaxBuildMemoryMiB)
	}
	switch {
	case vcpu < 0 || memoryMiB < 0 || (memoryMiB > 0 && memoryMiB < minMemoryMiB):
		return errorf(http.StatusBadRequest, "cpuCount must be 1..%d and memoryMB %d..%d", maxCPU, minMemoryMiB, maxMem)
	case vcpu > maxCPU:
		return errorf(http.StatusBadRequest, "cpuCount %d is above this API's maximum of %d vCPU a sandbox (the operator's api.buildResources.maxVCPU)", vcpu, maxCPU)
	case memoryMiB > maxMem:
		return errorf(http.StatusBadRequest, "memoryMB %d is above this API's maximum of %d MiB a sandbox (the operator's api.buildResources.maxMemoryMiB)", memoryMiB, maxMem)
	}
	return nil
}
