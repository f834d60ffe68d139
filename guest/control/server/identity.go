package server

import (
	"crypto/rand"
	"crypto/sha512"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sandlot-dev/sandlot/guest/control"
	"github.com/sandlot-dev/sandlot/guest/identity"
	"github.com/sandlot-dev/sandlot/internal/version"
)

// SetIdentity applies a (new) identity, as the setIdentity method does:
//
//  1. always: reseed the kernel RNG from the host's seed mixed with the
//     time (clones of one snapshot share RNG state until this runs);
//  2. with ApplyHost: step the clock to UnixNano, set the hostname, and
//     move the NIC to the new address and MAC (see applyNetwork);
//  3. record the identity in the store (the envd API reads it).
//
// Go's crypto/rand reads getrandom on every call, so it follows the
// reseeded kernel RNG with nothing more to do.
func (h *Handler) SetIdentity(p control.SetIdentityParams) control.SetIdentityResult {
	res := control.SetIdentityResult{StepNanos: map[string]int64{}, Agent: version.Version}
	fail := func(step string, err error) {
		res.Errors = append(res.Errors, step+": "+err.Error())
	}
	last := time.Now()
	took := func(step string) {
		now := time.Now()
		res.StepNanos[step] = now.Sub(last).Nanoseconds()
		last = now
	}
	var err error
	res.Entropy, res.Reseeded, err = reseedKernel(p.Seed, p.Identity)
	if err != nil {
		fail("rng", err)
	}
	took("rng")
	if h.opts.ApplyHost {
		if p.UnixNano != 0 {
			ts := unix.NsecToTimespec(p.UnixNano)
			if _, _, err := unix.RawSyscall(unix.SYS_CLOCK_SETTIME, unix.CLOCK_REALTIME, uintptr(unsafe.Pointer(&ts)), 0); err != 0 {
				fail("clock", err)
			} else {
				res.Clock = true
			}
			took("clock")
		}
		if p.Hostname != "" {
			if err := h.applyHostname(p.Hostname); err != nil {
				fail("hostname", err)
			} else {
				res.Hostname = true
			}
			took("hostname")
		}
		if n := p.Network; n != nil || h.nic.networkDropped() {
			res.Network = h.applyNetwork(&p, fail, took)
		}
		if err := h.unmountVolumes(h.store.Get().Volumes); err != nil {
			fail("volumes", err)
		}
		took("volumes")
		if p.EgressCA != "" {
			if err := installEgressCA(p.EgressCA); err != nil {
				fail("egressCA", err)
			}
			took("egressCA")
		}
	}
	h.store.Set(p.Identity)
	res.Stored = true
	if len(res.Errors) > 0 {
		h.log.Warn("control: setIdentity incomplete", "errors", res.Errors)
	}
	return res
}

// applyNetwork moves the NIC to p's network and points the resolver at
// the host's forwarder. A VM whose network was dropped, given none, gets
// the recorded one (p takes it, so the store keeps it).
func (h *Handler) applyNetwork(p *control.SetIdentityParams, fail func(string, error), took func(string)) bool {
	n, prev := p.Network, h.store.Get().Network
	if n == nil {
		n, p.Network = prev, prev
	}
	if n == nil {
		fail("network", errors.New("network dropped and none recorded"))
		took("network")
		return false
	}
	ok := true
	if err := h.nic.apply(*n, prev, took); err != nil {
		fail("network", err)
		ok = false
	}
	took("network")
	if n.DNS != nil {
		if err := writeResolvConf(h.opts.resolvConf, *n.DNS); err != nil {
			fail("dns", err)
		}
		took("dns")
	}
	return ok
}

// applyHostname sets the kernel hostname. The hostname file, when it
// exists, is bound once to /proc/sys/kernel/hostname (as container
// runtimes bind /etc/hostname): it then reads the kernel's hostname with
// nothing to write per identity — writing it on the overlay cost a
// restored clone 40–65 ms under TCG. Where the bind fails the file is
// written (best effort: a read-only /etc is not an error).
func (h *Handler) applyHostname(name string) error {
	b := []byte(name)
	if len(b) == 0 {
		return errors.New("empty hostname")
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETHOSTNAME, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), 0); e != 0 {
		return e
	}
	h.hostnameMu.Lock()
	defer h.hostnameMu.Unlock()
	file := h.opts.hostnameFile
	if h.hostnameBound || file == "" {
		return nil
	}
	if _, err := os.Stat(file); err != nil {
		return nil
	}
	if err := unix.Mount("/proc/sys/kernel/hostname", file, "", unix.MS_BIND, ""); err == nil {
		h.hostnameBound = true
		return nil
	}
	_ = os.WriteFile(file, []byte(name+"\n"), 0o644)
	return nil
}

// writeResolvConf points the guest's resolver at the host's forwarder.
// Clones of one snapshot mostly get what they have: unchanged, the file
// is not written (a write on the overlay costs tens of ms under TCG). A
// symlink (systemd-resolved's) is replaced by a file.
func writeResolvConf(path string, d identity.DNS) error {
	var b strings.Builder
	for _, ns := range d.Nameservers {
		b.WriteString("nameserver " + ns + "\n")
	}
	if len(d.Search) > 0 {
		b.WriteString("search " + strings.Join(d.Search, " ") + "\n")
	}
	if len(d.Options) > 0 {
		b.WriteString("options " + strings.Join(d.Options, " ") + "\n")
	}
	want := b.String()
	if fi, err := os.Lstat(path); err == nil && fi.Mode().IsRegular() {
		if cur, err := os.ReadFile(path); err == nil && string(cur) == want {
			return nil
		}
	}
	tmp := path + ".sandlot"
	if err := os.WriteFile(tmp, []byte(want), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("replace %s: %w", path, err)
	}
	return nil
}

// rawOpen opens a device that does not block on open.
func rawOpen(path string, flags int) (int, error) {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return -1, err
	}
	dir := unix.AT_FDCWD
	fd, _, e := unix.RawSyscall6(unix.SYS_OPENAT, uintptr(dir), uintptr(unsafe.Pointer(p)), uintptr(flags), 0, 0, 0)
	if e != 0 {
		return -1, fmt.Errorf("open %s: %w", path, e)
	}
	return int(fd), nil
}

// randPoolInfo is struct rand_pool_info with a 64-byte buffer.
type randPoolInfo struct {
	entropyCount int32 // bits credited
	bufSize      int32 // bytes
	buf          [64]byte
}

// reseedKernel feeds 64 bytes into the kernel's input pool with
// RNDADDENTROPY (crediting 8 bits per host seed byte, at most 512), then
// forces a CRNG reseed with RNDRESEEDCRNG. Both need CAP_SYS_ADMIN;
// without it the bytes are still mixed in by a plain write (no credit)
// and the missing capability is reported. The bytes are the host's seed
// when it brings 64 (its crypto/rand, distinct per clone; the kernel
// hashes what it is fed); a shorter seed is stretched by reseedBytes.
func reseedKernel(seed []byte, id identity.Identity) (entropy, reseeded bool, err error) {
	info := randPoolInfo{bufSize: 64}
	if len(seed) >= len(info.buf) {
		copy(info.buf[:], seed)
	} else {
		copy(info.buf[:], reseedBytes(seed, id))
	}
	info.entropyCount = int32(8 * min(len(seed), 64))

	// Raw system calls (see rawSend): neither os.File's poller set-up nor
	// the runtime's syscall bookkeeping, code a restored clone would run
	// (and translate, under TCG) for nothing here.
	fd, err := rawOpen("/dev/urandom", unix.O_WRONLY|unix.O_CLOEXEC)
	if err != nil {
		return false, false, err
	}
	defer unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0)
	var addErr, reseedErr error
	if _, _, e := unix.RawSyscall(unix.SYS_IOCTL, uintptr(fd), unix.RNDADDENTROPY, uintptr(unsafe.Pointer(&info))); e != 0 {
		addErr = e
	}
	if _, _, e := unix.RawSyscall(unix.SYS_IOCTL, uintptr(fd), unix.RNDRESEEDCRNG, 0); e != 0 {
		reseedErr = e
	}
	var errs []error
	if addErr != nil {
		if _, werr := unix.Write(fd, info.buf[:]); werr != nil {
			errs = append(errs, fmt.Errorf("RNDADDENTROPY: %w%s; write /dev/urandom: %w", addErr, capHint(addErr), werr))
		} else {
			errs = append(errs, fmt.Errorf("RNDADDENTROPY: %w%s; seed mixed in by a write, without credit", addErr, capHint(addErr)))
		}
	}
	if reseedErr != nil {
		errs = append(errs, fmt.Errorf("RNDRESEEDCRNG: %w%s", reseedErr, capHint(reseedErr)))
	}
	return addErr == nil, reseedErr == nil, errors.Join(errs...)
}

// reseedBytes is SHA-512 of a short host seed, the clocks, the boot ID,
// the identity and 32 bytes of the guest's own RNG: distinct per clone
// even when the host's seed is not.
func reseedBytes(seed []byte, id identity.Identity) []byte {
	d := sha512.New()
	d.Write([]byte("sandlot-reseed-v1\x00"))
	d.Write(seed)
	var ts [3]unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_REALTIME, &ts[0])
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts[1])
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts[2])
	for _, t := range ts {
		_ = binary.Write(d, binary.LittleEndian, t.Nano())
	}
	_ = binary.Write(d, binary.LittleEndian, time.Now().UnixNano())
	d.Write([]byte(bootID()))
	d.Write([]byte(id.SandboxID))
	d.Write([]byte(id.Hostname))
	var local [32]byte
	_, _ = rand.Read(local[:])
	d.Write(local[:])
	return d.Sum(nil)
}

func capHint(err error) string {
	if errors.Is(err, unix.EPERM) {
		return " (needs CAP_SYS_ADMIN)"
	}
	return ""
}
