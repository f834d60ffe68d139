package store

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// The JuiceFS client answers internal requests on a control file that it
// serves in every directory of the mount (`.control`; `.jfs.control` in
// newer clients): `juicefs info` writes a request there and reads the
// answer back. sandlot asks it which objects hold a file's data, the
// same request `juicefs info <file>` makes (JuiceFS v1.2, cmd/info.go and
// pkg/vfs/internal.go), so the agent needs no juicefs binary.
const (
	jfsInfoV2    = 1005 // meta.InfoV2
	jfsProgress  = 0xFE // a progress frame: 16 bytes follow
	jfsData      = 0xFF // the answer: a 4-byte length and the JSON follow
	jfsCtlWait   = 20 * time.Millisecond
	jfsCtlBudget = 30 * time.Second
)

// jfsInfo is the part of the client's info answer sandlot reads.
type jfsInfo struct {
	Failed  bool
	Reason  string
	Objects []JuiceFSObject
}

// JuiceFSObject is a run of a file's data in one object of the volume, as
// the client lists them in file order: which 64 MiB chunk of the file,
// the object ("<volume>/chunks/..."; "" for a hole), its size, and the
// range of it the run reads. JuiceFS never rewrites an object, so the
// list pins the file's bytes to the objects' bytes.
type JuiceFSObject struct {
	ChunkIndex     uint64
	Key            string
	Size, Off, Len uint32
}

// JuiceFSObjects lists the objects holding path's data, asking the
// JuiceFS client serving path's mount (metadata only: no data is read).
func JuiceFSObjects(ctx context.Context, path string) ([]JuiceFSObject, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return nil, fmt.Errorf("juicefs info %s: %w", path, err)
	}
	ctl, err := openControl(filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("juicefs info %s: %w (is it on a JuiceFS mount?)", path, err)
	}
	defer ctl.Close()
	req := make([]byte, 8+11)
	binary.BigEndian.PutUint32(req[0:], jfsInfoV2)
	binary.BigEndian.PutUint32(req[4:], 11)
	binary.BigEndian.PutUint64(req[8:], st.Ino) // then recursive, raw, strict: all 0
	if _, err := ctl.Write(req); err != nil {
		return nil, fmt.Errorf("juicefs info %s: request: %w", path, err)
	}
	data, err := readControl(ctx, ctl)
	if err != nil {
		return nil, fmt.Errorf("juicefs info %s: %w", path, err)
	}
	var info jfsInfo
	if err := json.Unmarshal(data, &info); err != nil {
		return nil, fmt.Errorf("juicefs info %s: answer: %w", path, err)
	}
	if info.Failed {
		return nil, fmt.Errorf("juicefs info %s: %s", path, info.Reason)
	}
	return info.Objects, nil
}

// jfsControlInode is the control file's inode in every JuiceFS client
// (pkg/vfs/internal.go: minInternalNode + 2), a number no file of the
// volume has.
const jfsControlInode = 0x7FFFFFFF00000000 + 2

// openControl opens the client's control file in dir: ".jfs.control"
// (clients mounted with --prefix-internal) or ".control". Either name may
// also be an ordinary file a writer of the volume put there to answer in
// the client's place (forged object lists would forge layouts), so only
// the file with the client's control inode is used.
func openControl(dir string) (*os.File, error) {
	for _, name := range []string{".jfs.control", ".control"} {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR, 0)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(int(f.Fd()), &st); err == nil && st.Ino == jfsControlInode {
			return f, nil
		}
		f.Close()
	}
	return nil, fmt.Errorf("no JuiceFS control file in %s (an ordinary file by its name is not one)", dir)
}

// readControl reads the client's answer: progress frames, then either the
// data frame or a single errno byte. The client answers while it works,
// so a read finding nothing yet is retried.
func readControl(ctx context.Context, ctl io.Reader) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, jfsCtlBudget)
	defer cancel()
	var buf []byte
	chunk := make([]byte, 64<<10)
	wait := time.Millisecond // the answer is often a few ms away: back off to jfsCtlWait
	for {
		n, err := ctl.Read(chunk)
		buf = append(buf, chunk[:n]...)
		if data, done, perr := parseControl(buf); done || perr != nil {
			return data, perr
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("read answer: %w", err)
		}
		if n == 0 {
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("no answer from the JuiceFS client: %w", ctx.Err())
			case <-time.After(wait):
			}
			wait = min(2*wait, jfsCtlWait)
		}
	}
}

// parseControl parses what was read so far; done once the answer is whole.
func parseControl(buf []byte) (data []byte, done bool, err error) {
	for off := 0; off < len(buf); {
		switch buf[off] {
		case jfsProgress:
			if off+17 > len(buf) {
				return nil, false, nil
			}
			off += 17
		case jfsData:
			if off+5 > len(buf) {
				return nil, false, nil
			}
			size := int(binary.BigEndian.Uint32(buf[off+1:]))
			if off+5+size > len(buf) {
				return nil, false, nil
			}
			return buf[off+5 : off+5+size], true, nil
		default:
			return nil, true, fmt.Errorf("the JuiceFS client answered %w", syscall.Errno(buf[off]))
		}
	}
	return nil, false, nil
}
