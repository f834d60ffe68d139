// External test package: the runc test uses internal/crienv, which imports oci.
package oci_test

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/sandlot-dev/sandlot/internal/crienv"
	"github.com/sandlot-dev/sandlot/internal/oci"
	"github.com/sandlot-dev/sandlot/internal/vmassets"
)

// testTree makes a small tree with each kind of entry TarTree handles.
func testTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755))
	must(os.WriteFile(filepath.Join(root, "usr/bin/tool"), []byte("#!/bin/sh\necho hi\n"), 0o755))
	must(os.Chmod(filepath.Join(root, "usr/bin/tool"), os.ModeSetuid|0o755)) // past the umask
	must(os.Symlink("usr/bin", filepath.Join(root, "bin")))
	must(os.Link(filepath.Join(root, "usr/bin/tool"), filepath.Join(root, "usr/bin/tool2")))
	must(os.Mkdir(filepath.Join(root, "tmp"), 0o755))
	must(os.Chmod(filepath.Join(root, "tmp"), os.ModeSticky|0o777))
	must(os.MkdirAll(filepath.Join(root, "home/user"), 0o700))
	must(os.WriteFile(filepath.Join(root, "home/user/.profile"), []byte("x\n"), 0o600))
	must(syscall.Mkfifo(filepath.Join(root, "fifo"), 0o600))
	if os.Geteuid() == 0 {
		must(os.Lchown(filepath.Join(root, "home/user"), 1000, 1000))
		must(os.Lchown(filepath.Join(root, "home/user/.profile"), 1000, 1001))
	}
	return root
}

// TestTarTree checks the layer's entries: order, kinds, modes, owners,
// symlink and hard link targets.
func TestTarTree(t *testing.T) {
	root := testTree(t)
	var buf bytes.Buffer
	if err := oci.TarTree(&buf, root); err != nil {
		t.Fatal(err)
	}
	uid, gid := 1000, 1001
	if os.Geteuid() != 0 {
		uid, gid = os.Geteuid(), os.Getegid()
	}
	type entry struct {
		typ      byte
		mode     int64
		uid, gid int
		link     string
	}
	want := []string{"bin", "fifo", "home/", "home/user/", "home/user/.profile", "tmp/", "usr/", "usr/bin/", "usr/bin/tool", "usr/bin/tool2"}
	checks := map[string]entry{
		"bin":                {typ: tar.TypeSymlink, mode: 0o777, link: "usr/bin"},
		"fifo":               {typ: tar.TypeFifo, mode: 0o600},
		"tmp/":               {typ: tar.TypeDir, mode: 0o1777},
		"home/user/.profile": {typ: tar.TypeReg, mode: 0o600, uid: uid, gid: gid},
		"usr/bin/tool":       {typ: tar.TypeReg, mode: 0o4755},
		"usr/bin/tool2":      {typ: tar.TypeLink, mode: 0o4755, link: "usr/bin/tool"},
	}
	tr := tar.NewReader(&buf)
	var got []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, h.Name)
		if c, ok := checks[h.Name]; ok {
			if os.Geteuid() != 0 && c.uid == 0 {
				c.uid, c.gid = os.Geteuid(), os.Getegid()
			}
			g := entry{typ: h.Typeflag, mode: h.Mode, uid: h.Uid, gid: h.Gid, link: h.Linkname}
			if g != c {
				t.Errorf("%s: got %+v, want %+v", h.Name, g, c)
			}
		}
		if h.Name == "usr/bin/tool" {
			if b, _ := io.ReadAll(tr); string(b) != "#!/bin/sh\necho hi\n" {
				t.Errorf("usr/bin/tool: content %q", b)
			}
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("entries\n %v\nwant\n %v", got, want)
	}
}

// TestWriteArchive checks that the same input gives the same manifest
// digest and that the archive is a consistent OCI layout: every blob
// matches its digest and the config names the layer as its diffID.
func TestWriteArchive(t *testing.T) {
	root, dir := testTree(t), t.TempDir()
	cfg := oci.Config{Cmd: []string{"sleep", "infinity"}, Env: []string{"PATH=/usr/bin"}, WorkingDir: "/"}
	layer := func(w io.Writer) error { return oci.TarTree(w, root) }
	const ref = "docker.io/library/x:1"
	d1, err := oci.WriteArchive(filepath.Join(dir, "a.tar"), ref, cfg, layer)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := oci.WriteArchive(filepath.Join(dir, "b.tar"), ref, cfg, layer)
	if err != nil {
		t.Fatal(err)
	}
	if d1 != d2 || !strings.HasPrefix(d1, "sha256:") {
		t.Fatalf("digests %s %s: want equal sha256 digests", d1, d2)
	}
	a, _ := os.ReadFile(filepath.Join(dir, "a.tar"))
	b, _ := os.ReadFile(filepath.Join(dir, "b.tar"))
	if !bytes.Equal(a, b) {
		t.Errorf("the same input gave different archive bytes")
	}
	checkLayout(t, a, d1, ref, cfg)

	cfg.Cmd = []string{"true"}
	if d3, err := oci.WriteArchive(filepath.Join(dir, "c.tar"), ref, cfg, layer); err != nil || d3 == d1 {
		t.Errorf("another Cmd: digest %s (err %v), want one different from %s", d3, err, d1)
	}
	if _, err := oci.WriteArchive(filepath.Join(dir, "d.tar"), ref, cfg, func(io.Writer) error { return io.ErrUnexpectedEOF }); err == nil {
		t.Errorf("a failing layer gave no error")
	}
	if _, err := os.Stat(filepath.Join(dir, "d.tar")); !os.IsNotExist(err) {
		t.Errorf("a failed archive was left behind (%v)", err)
	}
}

// checkLayout reads the archive like an importer would.
func checkLayout(t *testing.T, archive []byte, digest, ref string, cfg oci.Config) {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = data
		if name, ok := strings.CutPrefix(h.Name, "blobs/sha256/"); ok {
			if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != name {
				t.Errorf("blob %s has digest %x", name, sum)
			}
		}
	}
	var index struct {
		Manifests []struct {
			Digest      string
			Annotations map[string]string
		}
	}
	unmarshal(t, files["index.json"], &index)
	if len(index.Manifests) != 1 || index.Manifests[0].Digest != digest ||
		index.Manifests[0].Annotations["io.containerd.image.name"] != ref ||
		index.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "1" {
		t.Fatalf("index.json: %s", files["index.json"])
	}
	var manifest struct {
		Config struct{ Digest string }
		Layers []struct{ MediaType, Digest string }
	}
	unmarshal(t, files[blob(digest)], &manifest)
	if len(manifest.Layers) != 1 || manifest.Layers[0].MediaType != oci.MediaTypeLayer {
		t.Fatalf("manifest: %s", files[blob(digest)])
	}
	var config struct {
		Config oci.Config
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		}
	}
	unmarshal(t, files[blob(manifest.Config.Digest)], &config)
	if len(config.RootFS.DiffIDs) != 1 || config.RootFS.DiffIDs[0] != manifest.Layers[0].Digest {
		t.Errorf("config diff_ids %v, layer %s", config.RootFS.DiffIDs, manifest.Layers[0].Digest)
	}
	if strings.Join(config.Config.Cmd, " ") != strings.Join(cfg.Cmd, " ") || config.Config.WorkingDir != cfg.WorkingDir {
		t.Errorf("config %+v, want %+v", config.Config, cfg)
	}
	if _, ok := files["oci-layout"]; !ok {
		t.Errorf("no oci-layout")
	}
}

func blob(digest string) string { return "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:") }

func unmarshal(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
}

// TestDebianImageRunsUnderRunc imports the Debian image hack/vm-assets.sh
// built into a real containerd and runs it under runc through CRI, as
// kubelet would on a cluster without a registry.
func TestDebianImageRunsUnderRunc(t *testing.T) {
	archive, ref := debianImage(t)
	e := crienv.Start(t, crienv.Options{Dir: t.TempDir(), Subnet: "10.89.20.0/24"})
	e.ImportArchive(t, archive, ref)

	podID, cfg := e.RunPod(t, "python", "runc", nil)
	ctrID := e.CreateStart(t, podID, cfg, "main", ref, nil)
	if st := e.ContainerState(t, ctrID); st != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("container state %v, want RUNNING (the image's sleep infinity)", st)
	}
	for _, c := range []struct {
		cmd  []string
		want string
	}{
		{[]string{"python3", "-c", "print(1+1)"}, "2\n"},
		{[]string{"id", "user"}, "uid=1000(user) gid=1000(user) groups=1000(user)\n"},
		{[]string{"pwd"}, "/\n"},
	} {
		out, errOut, code := e.ExecSync(t, ctrID, c.cmd...)
		if code != 0 || out != c.want {
			t.Errorf("%v: %q (stderr %q), exit %d; want %q", c.cmd, out, errOut, code, c.want)
		}
	}
	e.RemovePod(t, podID)
}

// debianImage is the image hack/vm-assets.sh built (current.env names it).
func debianImage(t *testing.T) (archive, ref string) {
	t.Helper()
	env, err := vmassets.Load()
	if err != nil {
		t.Fatal(err)
	}
	if env.Image == "" || env.ImageRef == "" {
		t.Fatal("current.env names no Debian image (SANDLOT_VM_IMAGE_DEBIAN, _REF): run `make vm-assets`")
	}
	if _, err := os.Stat(env.Image); err != nil {
		t.Fatalf("Debian image: %v: run `make vm-assets`", err)
	}
	return env.Image, env.ImageRef
}
