package crienv

// Importing images into containerd: ctr images import, the repo@digest
// name a registry pull would give, and waiting until CRI sees them.

import (
	"context"
	"fmt"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/sandlot-dev/sandlot/internal/oci"
	"github.com/sandlot-dev/sandlot/internal/poll"
)

// ImportImage writes img as an OCI archive under Dir/images, imports it
// into the k8s.io namespace with ctr, and also names it repo@digest the way
// a registry pull does, so CRI's ImageStatus lists that in RepoDigests. It
// waits until CRI sees both names and returns the manifest digest
// ("sha256:..."), which is the image's target in containerd. ref needs a
// registry host and a tag, e.g. "sandlot.test/app:1", because CRI would
// otherwise normalize it to a different name (docker.io/library/...).
func (e *Env) ImportImage(t T, ref string, img Image) string {
	t.Helper()
	if err := checkRef(ref); err != nil {
		t.Fatalf("crienv: ImportImage: %v", err)
	}
	archive := filepath.Join(e.Dir, "images", strings.NewReplacer("/", "_", ":", "_").Replace(ref)+".tar")
	digest, err := writeOCIArchive(archive, ref, img)
	if err != nil {
		t.Fatalf("crienv: ImportImage %s: %v", ref, err)
	}
	e.importArchive(t, archive, ref, digest)
	return digest
}

// ImportArchive imports an OCI image archive (one image, ref in its
// index) made elsewhere, e.g. by hack/ociimage.
func (e *Env) ImportArchive(t T, archive, ref string) string {
	t.Helper()
	digest, err := oci.ManifestDigest(archive)
	if err != nil {
		t.Fatalf("crienv: ImportArchive %s: %v", archive, err)
	}
	e.importArchive(t, archive, ref, digest)
	return digest
}

func (e *Env) importArchive(t T, archive, ref, digest string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	// Not `import --digests`: it names the archive's index digest
	// import-<date>@sha256:..., not the manifest under ref's repository.
	repoDigest := ref[:strings.LastIndex(ref, ":")] + "@" + digest
	for _, args := range [][]string{{"images", "import", archive}, {"images", "tag", "--force", ref, repoDigest}} {
		if err := e.ctr(ctx, args...); err != nil {
			t.Fatalf("crienv: ImportImage %s: %v", ref, err)
		}
	}
	if err := e.waitImage(ctx, ref, repoDigest); err != nil {
		t.Fatalf("crienv: ImportImage %s: %v", ref, err)
	}
	if err := e.forgetOtherDigests(ctx, repoDigest); err != nil {
		t.Fatalf("crienv: ImportImage %s: %v", ref, err)
	}
}

// forgetOtherDigests removes the repo@digest names earlier imports of the
// same repository left: each would keep its image's content alive, and a
// cluster that `make up` refreshes again and again filled the disk with
// them (150 MiB per agent image per node) until the kubelets reported
// DiskPressure. Running containers keep their snapshots.
func (e *Env) forgetOtherDigests(ctx context.Context, repoDigest string) error {
	repo, _, _ := strings.Cut(repoDigest, "@")
	out, err := e.ctrOutput(ctx, "images", "ls", "-q")
	if err != nil {
		return err
	}
	var stale []string
	for _, name := range strings.Fields(out) {
		if strings.HasPrefix(name, repo+"@sha256:") && name != repoDigest {
			stale = append(stale, name)
		}
	}
	if len(stale) == 0 {
		return nil
	}
	return e.ctr(ctx, append([]string{"images", "rm"}, stale...)...)
}

// ctr runs `ctr -a <Address> -n k8s.io args...`.
func (e *Env) ctr(ctx context.Context, args ...string) error {
	_, err := e.ctrOutput(ctx, args...)
	return err
}

func (e *Env) ctrOutput(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, e.bins.ctr, append([]string{"-a", e.Address, "-n", Namespace}, args...)...)
	cmd.Env = e.containerdEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("ctr %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// checkRef wants a fully qualified, tagged reference.
func checkRef(ref string) error {
	host, rest, ok := strings.Cut(ref, "/")
	if !ok || !strings.ContainsAny(host, ".:") && host != "localhost" {
		return fmt.Errorf("ref %q: want a registry host, e.g. sandlot.test/name:tag", ref)
	}
	if !strings.Contains(path.Base(rest), ":") {
		return fmt.Errorf("ref %q: want a tag", ref)
	}
	return nil
}

// waitImage waits for CRI's image store, which learns about new image names
// from containerd's events, to know ref and list repoDigest.
func (e *Env) waitImage(ctx context.Context, ref, repoDigest string) error {
	return poll.Until(ctx, "CRI lists "+ref+" with "+repoDigest, func() error {
		st, err := e.Images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		if err == nil && st.Image != nil && slices.Contains(st.Image.RepoDigests, repoDigest) {
			return nil
		}
		return fmt.Errorf("status %v, error %v", st.GetImage(), err)
	})
}

// CtrCommand is `ctr -a <Address> -n k8s.io args...`, to be started by the
// caller with its own stdio.
func (e *Env) CtrCommand(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, e.bins.ctr, append([]string{"-a", e.Address, "-n", Namespace}, args...)...)
	cmd.Env = e.containerdEnv()
	return cmd
}
