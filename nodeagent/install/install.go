package install

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	nodeapi "github.com/sandlot-dev/sandlot/api/node"
)

// File is one file copied from the installer's image onto the host.
type File struct {
	Src  string // in the installer's own filesystem
	Dest string // on the host (absolute, under HostRoot)
}

// Containerd is how the runtime is registered with the node's containerd.
type Containerd struct {
	// ConfigPath is containerd's main config on the host; it must import
	// DropInPath (containerd 2.x's default config imports
	// /etc/containerd/conf.d/*.toml).
	ConfigPath string
	DropInPath string
	// RuntimePath sets runtime_path to the shim binary (Options.Shim.Dest).
	RuntimePath bool
	// Restart restarts containerd so that it reads the drop-in (kata-deploy
	// does the same: systemctl in the host's namespaces).
	Restart func(context.Context) error
}

// Options say what to install where.
type Options struct {
	// HostRoot is where the host's / is mounted ("/" on the host itself).
	HostRoot string
	// Shim, Kernel and Initrd are copied when their Src is set.
	Shim, Kernel, Initrd File
	// QEMU, when its Src is set, is the QEMU bundle (vm.BundleManifest)
	// installed at its Dest; ShimConfig.QEMU should name its binary there.
	QEMU Tree
	// ShimConfigPath is where ShimConfig goes on the host (the runtime's
	// ConfigPath). ShimConfig's Kernel and Initrd are host paths.
	ShimConfigPath string
	ShimConfig     nodeapi.Config
	// Containerd, when set, registers the runtime in containerd.
	Containerd *Containerd
	// VolumeOwner owns ShimConfig.VolumeDir (made when missing): the
	// volume files' owner, as sandlot-api runs.
	VolumeOwner int
}

// Result says what changed on the host.
type Result struct {
	Changed   []string // host paths written or removed
	Restarted bool     // containerd was restarted
}

// Install copies the files, writes the shim config and, with Containerd
// set, the drop-in, restarting containerd only when the drop-in changed.
// Running it again changes nothing.
func Install(ctx context.Context, o Options) (Result, error) {
	var res Result
	for _, f := range []struct {
		file File
		mode fs.FileMode
	}{{o.Shim, 0o755}, {o.Kernel, 0o644}, {o.Initrd, 0o644}} {
		if f.file.Src == "" {
			continue
		}
		if err := res.record(o.copyFile(f.file, f.mode)); err != nil {
			return res, err
		}
	}
	if o.QEMU.Src != "" {
		if err := o.installQEMU(&res); err != nil {
			return res, err
		}
	}
	if err := o.prepareVolumeDir(&res); err != nil {
		return res, err
	}
	cfg, err := RenderShimConfig(o.ShimConfig)
	if err != nil {
		return res, err
	}
	changed, err := o.write(o.ShimConfigPath, cfg, 0o644)
	if err := res.record(o.ShimConfigPath, changed, err); err != nil {
		return res, err
	}
	if o.Containerd == nil {
		return res, nil
	}
	return res, o.register(ctx, &res)
}

// register writes the drop-in and restarts containerd if it changed. A
// failed restart puts the previous drop-in back, so that the next run
// sees a change and restarts again.
func (o Options) register(ctx context.Context, res *Result) error {
	c := o.Containerd
	if err := o.checkImported(); err != nil {
		return err
	}
	d := DropIn{ConfigPath: o.ShimConfigPath}
	if c.RuntimePath {
		d.RuntimePath = o.Shim.Dest
	}
	text, err := RenderDropIn(d)
	if err != nil {
		return err
	}
	prev, err := os.ReadFile(o.host(c.DropInPath))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read %s: %w", c.DropInPath, err)
	}
	changed, err := o.write(c.DropInPath, text, 0o644)
	if err != nil || !changed {
		return err
	}
	res.Changed = append(res.Changed, c.DropInPath)
	if err := c.Restart(ctx); err != nil {
		return errors.Join(fmt.Errorf("restart containerd: %w", err), o.restore(c.DropInPath, prev))
	}
	res.Restarted = true
	return nil
}

// checkImported fails when containerd's main config does not import the
// drop-in: writing it would change nothing.
func (o Options) checkImported() error {
	c := o.Containerd
	text, err := os.ReadFile(o.host(c.ConfigPath))
	if err != nil {
		return fmt.Errorf("containerd config %s (containerd reads drop-ins only through a config that imports them): %w", c.ConfigPath, err)
	}
	ok, err := Imports(text, c.ConfigPath, c.DropInPath)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("containerd config %s does not import %s: add `imports = [%q]` at its top (containerd 2.x's default config has it)",
			c.ConfigPath, c.DropInPath, filepath.Join(filepath.Dir(c.DropInPath), "*.toml"))
	}
	return nil
}

// restore puts back what a path held before (nothing: removes it).
func (o Options) restore(path string, prev []byte) error {
	if prev == nil {
		return o.remove(path)
	}
	_, err := o.write(path, prev, 0o644)
	return err
}

// Uninstall removes the drop-in (restarting containerd when it was
// there), then the shim config, the copied files and the QEMU bundle.
// Data (the image cache, the store) stays.
func Uninstall(ctx context.Context, o Options) (Result, error) {
	var res Result
	if c := o.Containerd; c != nil {
		removed, err := o.removeIfPresent(c.DropInPath)
		if err := res.record(c.DropInPath, removed, err); err != nil {
			return res, err
		}
		if removed {
			if err := c.Restart(ctx); err != nil {
				return res, fmt.Errorf("restart containerd: %w", err)
			}
			res.Restarted = true
		}
	}
	for _, p := range []string{o.ShimConfigPath, o.Shim.Dest, o.Kernel.Dest, o.Initrd.Dest} {
		if p == "" {
			continue
		}
		removed, err := o.removeIfPresent(p)
		if err := res.record(p, removed, err); err != nil {
			return res, err
		}
	}
	if o.QEMU.Dest != "" {
		return res, o.uninstallQEMU(o.QEMU.Dest, &res)
	}
	return res, nil
}

// record notes path as changed when it was.
func (r *Result) record(path string, changed bool, err error) error {
	if changed {
		r.Changed = append(r.Changed, path)
	}
	return err
}

// host is a host path as the installer sees it.
func (o Options) host(p string) string { return filepath.Join(o.HostRoot, p) }

func (o Options) copyFile(f File, mode fs.FileMode) (string, bool, error) {
	b, err := os.ReadFile(f.Src)
	if err != nil {
		return f.Dest, false, fmt.Errorf("install %s: %w", f.Dest, err)
	}
	changed, err := o.write(f.Dest, b, mode)
	return f.Dest, changed, err
}

// write puts b at host path p unless it holds b already: through a
// temporary file and a rename, so that a running shim binary is never
// written over and a reader never sees half a file.
func (o Options) write(p string, b []byte, mode fs.FileMode) (bool, error) {
	if !filepath.IsAbs(p) {
		return false, fmt.Errorf("install %q: want an absolute host path", p)
	}
	dst := o.host(p)
	if old, err := os.ReadFile(dst); err == nil && bytes.Equal(old, b) {
		if st, err := os.Stat(dst); err == nil && st.Mode().Perm() == mode {
			return false, nil
		}
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return false, fmt.Errorf("install %s: %w", p, err)
	}
	if err := writeAtomic(dst, b, mode); err != nil {
		return false, fmt.Errorf("install %s: %w", p, err)
	}
	return true, nil
}

func writeAtomic(dst string, b []byte, mode fs.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename: nothing
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Chmod(mode)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

func (o Options) removeIfPresent(p string) (bool, error) {
	err := os.Remove(o.host(p))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("uninstall %s: %w", p, err)
}

func (o Options) remove(p string) error {
	_, err := o.removeIfPresent(p)
	return err
}

// prepareVolumeDir makes the volume storage's root when it is missing
// (the operator mounts the shared filesystem there), owned by the volume
// owner, closed to other node users. An existing root is left as it is.
func (o Options) prepareVolumeDir(res *Result) error {
	if o.ShimConfig.VolumeDir == "" {
		return nil
	}
	p := o.host(o.ShimConfig.VolumeDir)
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	if err := os.MkdirAll(p, 0o700); err != nil {
		return fmt.Errorf("make the volume storage %s: %w", o.ShimConfig.VolumeDir, err)
	}
	if err := os.Chown(p, o.VolumeOwner, o.VolumeOwner); err != nil {
		return fmt.Errorf("own the volume storage %s: %w", o.ShimConfig.VolumeDir, err)
	}
	return res.record(o.ShimConfig.VolumeDir, true, nil)
}
