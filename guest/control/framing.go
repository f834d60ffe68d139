package control

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"sync"
)

// errFrameTooLarge is returned by frameReader.next for a frame longer
// than its limit; the frame has been skipped and reading may go on.
var errFrameTooLarge = errors.New("frame too large")

// frameReader reads newline-terminated frames of bounded size.
type frameReader struct {
	br  *bufio.Reader
	max int
	buf []byte
}

func newFrameReader(r io.Reader, max int) *frameReader {
	return &frameReader{br: bufio.NewReaderSize(r, 64<<10), max: max}
}

// next returns the next frame without its newline (and without a
// trailing "\r"), skipping blank lines. The slice is valid until the next
// call. A frame over the limit is skipped whole and reported as
// errFrameTooLarge. A final frame without a newline is returned at EOF.
func (fr *frameReader) next() ([]byte, error) {
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

func (fr *frameReader) line() ([]byte, error) {
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
				return nil, errFrameTooLarge
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

// frameWriter writes whole frames; safe for concurrent use.
type frameWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// write marshals f and writes it with its newline in one Write.
func (fw *frameWriter) write(f *Frame) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return fw.writeRaw(append(b, '\n'))
}

func (fw *frameWriter) writeRaw(b []byte) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	_, err := fw.w.Write(b)
	return err
}

// encodeEvent renders an event frame (with its newline).
func encodeEvent(name string, params any) ([]byte, error) {
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
