package control

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
)

// ErrFrameTooLarge is returned by FrameReader.Next for a frame longer
// than its limit; the frame has been skipped and reading may go on.
var ErrFrameTooLarge = errors.New("frame too large")

// FrameReader reads newline-terminated frames of bounded size. Both ends
// of the channel read with it, so they agree on what a frame is.
type FrameReader struct {
	br  *bufio.Reader
	max int
	buf []byte
}

// NewFrameReader reads frames of at most max bytes from r.
func NewFrameReader(r io.Reader, max int) *FrameReader {
	return &FrameReader{br: bufio.NewReaderSize(r, 64<<10), max: max}
}

// Next returns the next frame without its newline (and without a
// trailing "\r"), skipping blank lines. The slice is valid until the next
// call. A frame over the limit is skipped whole and reported as
// ErrFrameTooLarge. A final frame without a newline is returned at EOF.
func (fr *FrameReader) Next() ([]byte, error) {
	for {
		line, err := fr.line()
		if err != nil && !(errors.Is(err, io.EOF) && len(line) > 0) {
			return nil, err
		}
		line = bytes.TrimRight(line, "\r")
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		return line, nil
	}
}

func (fr *FrameReader) line() ([]byte, error) {
	if cap(fr.buf) > 1<<20 {
		fr.buf = nil // do not keep a huge buffer after one big frame
	}
	fr.buf = fr.buf[:0]
	tooLarge := false
	for {
		chunk, err := fr.br.ReadSlice('\n')
		if !tooLarge {
			if len(fr.buf)+len(chunk) > fr.max {
				tooLarge = true
				fr.buf = fr.buf[:0]
			} else {
				fr.buf = append(fr.buf, chunk...)
			}
		}
		switch {
		case err == nil:
			if tooLarge {
				return nil, ErrFrameTooLarge
			}
			return fr.buf[:len(fr.buf)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			if tooLarge {
				return nil, err
			}
			return fr.buf, err
		}
	}
}

// FrameWriter writes whole frames; safe for concurrent use, so replies
// and events written from several goroutines never interleave.
type FrameWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// NewFrameWriter writes frames to w.
func NewFrameWriter(w io.Writer) *FrameWriter { return &FrameWriter{w: w} }

// WriteFrame marshals f and writes it with its newline in one Write.
func (fw *FrameWriter) WriteFrame(f *Frame) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return fw.WriteRaw(append(b, '\n'))
}

// WriteRaw writes an already encoded frame (newline included).
func (fw *FrameWriter) WriteRaw(b []byte) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	_, err := fw.w.Write(b)
	return err
}

// EncodeEvent renders an event frame (with its newline).
func EncodeEvent(name string, params any) ([]byte, error) {
	p, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(&Frame{Event: name, Params: p})
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// IsClosed reports whether err means the stream has ended (either side
// closed it), as opposed to a failure worth reporting.
func IsClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrClosed) ||
		errors.Is(err, io.ErrClosedPipe) || errors.Is(err, syscall.ECONNRESET)
}
