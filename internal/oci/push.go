package oci

import (
	"context"
	"fmt"
	"strings"

	"oras.land/oras-go/v2"
	orasoci "oras.land/oras-go/v2/content/oci"
	"oras.land/oras-go/v2/registry/remote"
)

// Push copies the image of an archive WriteArchive wrote to ref
// (host[:port]/repository:tag) in an OCI registry, blobs and manifest
// byte for byte (the digest a node pulls is the archive's), and returns
// the manifest's digest. plainHTTP speaks HTTP to the registry (a local
// one); otherwise HTTPS with the system's roots.
func Push(ctx context.Context, archive, ref string, plainHTTP bool) (string, error) {
	src, err := orasoci.NewFromTar(ctx, archive)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", archive, err)
	}
	srcTag, err := archiveTag(archive)
	if err != nil {
		return "", err
	}
	name, tag, ok := splitTag(ref)
	if !ok {
		return "", fmt.Errorf("push %s: want host/repository:tag", ref)
	}
	repo, err := remote.NewRepository(name)
	if err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	repo.PlainHTTP = plainHTTP
	desc, err := oras.Copy(ctx, src, srcTag, repo, tag, oras.DefaultCopyOptions)
	if err != nil {
		return "", fmt.Errorf("push %s to %s: %w", archive, ref, err)
	}
	return desc.Digest.String(), nil
}

// archiveTag is the tag the archive's one manifest is named by (the OCI
// ref.name WriteArchive sets), or its digest when it has none.
func archiveTag(archive string) (string, error) {
	idx, err := readIndex(archive)
	if err != nil {
		return "", err
	}
	if len(idx.Manifests) != 1 {
		return "", fmt.Errorf("%s: %d manifests, want 1", archive, len(idx.Manifests))
	}
	m := idx.Manifests[0]
	if tag := m.Annotations["org.opencontainers.image.ref.name"]; tag != "" {
		return tag, nil
	}
	return m.Digest, nil
}

// splitTag splits host/repo:tag into host/repo and tag.
func splitTag(ref string) (name, tag string, ok bool) {
	i := strings.LastIndex(ref, ":")
	if i < 0 || i < strings.LastIndex(ref, "/") || !strings.Contains(ref[:i], "/") {
		return "", "", false
	}
	return ref[:i], ref[i+1:], true
}
