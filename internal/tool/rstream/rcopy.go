package rstream

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// RcopyPort is rcopy's port (7427).
const RcopyPort = 7427

// rcopy.c's commands and message layout: struct msg_hdr {version, command,
// len (u16), data (u32), id (u64)} in the host's byte order (rcopy has no
// byte swapping; its hosts are little-endian), followed by a NUL-ended
// path padded to 8 bytes (CMD_OPEN, data = the file's mode) or the size
// (CMD_WRITE, u64), then the bytes. Each command gets a response header
// whose command has CMD_RESP set and whose data is an errno or 0.
const (
	cmdOpen  = 1
	cmdClose = 2
	cmdWrite = 3
	cmdResp  = 0x80
	hdrLen   = 16
)

type msgHdr struct {
	version, command uint8
	length           uint16
	data             uint32
	id               uint64
}

func (h msgHdr) put(b []byte) {
	le := binary.LittleEndian
	b[0], b[1] = h.version, h.command
	le.PutUint16(b[2:], h.length)
	le.PutUint32(b[4:], h.data)
	le.PutUint64(b[8:], h.id)
}

func parseHdr(b []byte) msgHdr {
	le := binary.LittleEndian
	return msgHdr{b[0], b[1], le.Uint16(b[2:]), le.Uint32(b[4:]), le.Uint64(b[8:])}
}

// CopyStream is what rcopy runs on: a Stream that also reads what has
// come (rrecv without MSG_WAITALL).
type CopyStream interface {
	Stream
	Read(ctx context.Context, p []byte) (int, error)
}

// RcopyError is the peer's errno in a response.
type RcopyError struct {
	Command string
	Errno   syscall.Errno
}

func (e *RcopyError) Error() string {
	return fmt.Sprintf("rcopy: the server answered %s with %d (%v)", e.Command, int(e.Errno), e.Errno)
}

func sendHdr(ctx context.Context, s CopyStream, h msgHdr, extra []byte) error {
	b := make([]byte, hdrLen+len(extra))
	h.put(b)
	copy(b[hdrLen:], extra)
	_, err := s.Write(ctx, b)
	return err
}

func recvHdr(ctx context.Context, s CopyStream) (msgHdr, error) {
	var b [hdrLen]byte
	if err := s.ReadFull(ctx, b[:]); err != nil {
		return msgHdr{}, err
	}
	h := parseHdr(b[:])
	if h.version != 0 || h.length < hdrLen {
		return h, fmt.Errorf("invalid version %d or length %d", h.version, h.length)
	}
	return h, nil
}

// response waits for the answer to cmd.
func response(ctx context.Context, s CopyStream, cmd uint8, name string) error {
	h, err := recvHdr(ctx, s)
	if err != nil {
		return err
	}
	if h.length != hdrLen || h.command != cmd|cmdResp {
		return fmt.Errorf("invalid length %d or bad command response %x:%x", h.length, h.command, cmd|cmdResp)
	}
	if h.data != 0 {
		return &RcopyError{Command: name, Errno: syscall.Errno(h.data)}
	}
	return nil
}

// CopyResult is what a client's copy moved.
type CopyResult struct {
	Bytes   int64
	Elapsed time.Duration
}

// String is rcopy's show_perf line.
func (r CopyResult) String() string {
	usec := float64(r.Elapsed.Microseconds())
	if usec == 0 {
		usec = 1
	}
	return fmt.Sprintf("%d bytes in %.2f seconds = %.2f Gb/sec\n", r.Bytes, usec/1e6, float64(r.Bytes)*8/(1000*usec))
}

// CopyTo is rcopy's client: it sends src to the server as dst (open,
// write, close), printing rcopy's progress to out, then shuts s down.
func CopyTo(ctx context.Context, s CopyStream, src, dst string, out io.Writer) (CopyResult, error) {
	var res CopyResult
	fmt.Fprint(out, "opening...")
	f, err := os.Open(src)
	if err != nil {
		return res, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return res, err
	}
	if !st.Mode().IsRegular() {
		return res, fmt.Errorf("%s: not a regular file", src)
	}
	res.Bytes = st.Size()
	path := make([]byte, (len(dst)+8)&^7) // NUL-ended, padded to 8
	copy(path, dst)
	if hdrLen+len(path) > 0xFFFF {
		return res, fmt.Errorf("%s: the destination's name is too long for rcopy's 16-bit message length", dst)
	}
	err = sendHdr(ctx, s, msgHdr{command: cmdOpen, length: uint16(hdrLen + len(path)), data: uint32(unixMode(st.Mode()))}, path)
	if err == nil {
		err = response(ctx, s, cmdOpen, "open")
	}
	if err != nil {
		return res, finish(ctx, s, err)
	}
	fmt.Fprint(out, "transferring")
	var size [8]byte
	binary.LittleEndian.PutUint64(size[:], uint64(res.Bytes))
	err = sendHdr(ctx, s, msgHdr{command: cmdWrite, length: hdrLen + 8}, size[:])
	if err == nil {
		fmt.Fprint(out, "...")
		start := time.Now()
		err = sendFile(ctx, s, f, res.Bytes)
		if err == nil {
			err = response(ctx, s, cmdWrite, "write")
		}
		res.Elapsed = time.Since(start)
	}
	fmt.Fprint(out, "closing...")
	cerr := sendHdr(ctx, s, msgHdr{command: cmdClose, length: hdrLen}, nil)
	if cerr == nil {
		cerr = response(ctx, s, cmdClose, "close")
	}
	if cerr == nil {
		fmt.Fprintln(out, "done")
	}
	return res, finish(ctx, s, errors.Join(err, cerr))
}

// finish shuts s down and closes it, keeping err.
func finish(ctx context.Context, s CopyStream, err error) error {
	serr := s.Shutdown(ctx)
	s.Close()
	if err != nil {
		return err
	}
	return serr
}

func sendFile(ctx context.Context, s CopyStream, f *os.File, n int64) error {
	buf := make([]byte, 1<<20)
	for left := n; left > 0; {
		k, err := io.ReadFull(f, buf[:min(int64(len(buf)), left)])
		if err != nil {
			return fmt.Errorf("read %s: %w", f.Name(), err)
		}
		if _, err := s.Write(ctx, buf[:k]); err != nil {
			return err
		}
		left -= int64(k)
	}
	return nil
}

// unixMode is st_mode's permission bits of m.
func unixMode(m fs.FileMode) uint32 {
	mode := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= syscall.S_ISUID
	}
	if m&fs.ModeSetgid != 0 {
		mode |= syscall.S_ISGID
	}
	if m&fs.ModeSticky != 0 {
		mode |= syscall.S_ISVTX
	}
	return mode | syscall.S_IFREG
}

// Serve is rcopy's server on one connection (server_process): it opens,
// fills and closes the files the client names, answering each command,
// until the client ends the connection or a command fails. Its progress
// goes to out as rcopy prints it. Paths are the client's, as given, like
// rcopy's: relative ones name files under the server's directory.
func Serve(ctx context.Context, s CopyStream, out io.Writer) error {
	var file *os.File
	defer func() {
		if file != nil {
			file.Close()
		}
	}()
	for {
		h, err := recvHdr(ctx, s)
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				return nil // the client is done
			}
			return err
		}
		status := uint32(0)
		switch h.command {
		case cmdOpen:
			fmt.Fprint(out, "opening: ")
			path := make([]byte, int(h.length)-hdrLen)
			if err := s.ReadFull(ctx, path); err != nil {
				fmt.Fprintln(out, "error receiving path")
				return err
			}
			name := string(path)
			if i := indexNUL(path); i >= 0 {
				name = string(path[:i])
			}
			fmt.Fprintf(out, "%s, ", name)
			switch {
			case file != nil:
				fmt.Fprintln(out, "cannot open another file")
				status = uint32(syscall.EBUSY)
			default:
				file, err = os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, fs.FileMode(h.data&0o777))
				if err != nil {
					fmt.Fprintln(out, "unable to open destination file")
					status = errnoOf(err)
					file = nil
				}
			}
		case cmdWrite:
			fmt.Fprint(out, "transferring")
			status, err = receiveFile(ctx, s, h, file, out)
			if err != nil {
				return err
			}
		case cmdClose:
			fmt.Fprint(out, "closing...")
			if file != nil {
				err = file.Close()
				file = nil
				if err != nil {
					status = errnoOf(err)
				}
			}
		default:
			status = uint32(syscall.EINVAL)
		}
		if err := sendHdr(ctx, s, msgHdr{command: h.command | cmdResp, length: hdrLen, data: status, id: h.id}, nil); err != nil {
			return err
		}
		switch {
		case h.command == cmdClose:
			fmt.Fprintln(out, "done")
		case status != 0:
			return &RcopyError{Command: fmt.Sprintf("command %d", h.command), Errno: syscall.Errno(status)}
		}
	}
}

func receiveFile(ctx context.Context, s CopyStream, h msgHdr, file *os.File, out io.Writer) (uint32, error) {
	if file == nil {
		fmt.Fprintln(out, "...file not opened")
		return uint32(syscall.EINVAL), nil
	}
	if h.length != hdrLen+8 {
		fmt.Fprintf(out, "...invalid message length %d\n", h.length)
		return uint32(syscall.EINVAL), nil
	}
	var size [8]byte
	if err := s.ReadFull(ctx, size[:]); err != nil {
		return 0, err
	}
	n := int64(binary.LittleEndian.Uint64(size[:]))
	if err := file.Truncate(n); err != nil {
		return errnoOf(err), nil
	}
	fmt.Fprintf(out, "...%d bytes...", n)
	buf := make([]byte, 1<<20)
	for off := int64(0); off < n; {
		k, err := s.Read(ctx, buf[:min(int64(len(buf)), n-off)])
		if err != nil {
			fmt.Fprintln(out, "...error receiving data")
			return 0, err
		}
		if _, err := file.WriteAt(buf[:k], off); err != nil {
			return 0, fmt.Errorf("write %s: %w", file.Name(), err)
		}
		off += int64(k)
	}
	return 0, nil
}

func indexNUL(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}

// errnoOf is err's errno, EIO if it has none.
func errnoOf(err error) uint32 {
	var e syscall.Errno
	if errors.As(err, &e) {
		return uint32(e)
	}
	return uint32(syscall.EIO)
}
