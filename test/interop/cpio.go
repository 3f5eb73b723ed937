package interop

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// cpioWriter writes the SVR4 "newc" archive format, the only one the kernel
// unpacks as an initramfs (torvalds/linux
// Documentation/driver-api/early-userspace/buffer-format.rst). Building the
// archive here rather than with cpio(1) lets the image add device nodes
// without mknod, drop what the guest does not need on the way, and come out
// byte for byte the same for the same tree (sorted names, one fixed mtime,
// inode numbers by position).
type cpioWriter struct {
	w     *bufio.Writer
	ino   uint32
	mtime uint32
	err   error
}

const (
	cpioMagic     = "070701"
	cpioHeaderLen = 110
	cpioTrailer   = "TRAILER!!!"
)

func newCPIOWriter(w io.Writer, mtime uint32) *cpioWriter {
	return &cpioWriter{w: bufio.NewWriterSize(w, 1<<20), mtime: mtime}
}

// cpioEntry is one archive member. Mode carries the file type bits
// (unix.S_IFREG, S_IFDIR, S_IFLNK, S_IFCHR, S_IFBLK) and the permissions.
type cpioEntry struct {
	Name       string // relative, without a leading slash
	Mode       uint32
	UID, GID   uint32
	Size       int64
	RdevMajor  uint32
	RdevMinor  uint32
	LinkTarget string // for symbolic links, written as the data
}

func (c *cpioWriter) pad(n int64) {
	if r := n % 4; r != 0 && c.err == nil {
		_, c.err = c.w.Write(make([]byte, 4-r))
	}
}

// header writes e's header and name; the caller writes Size data bytes and
// calls pad(Size).
func (c *cpioWriter) header(e *cpioEntry) error {
	if c.err != nil {
		return c.err
	}
	if e.Name == "" || strings.HasPrefix(e.Name, "/") || strings.ContainsRune(e.Name, 0) {
		return fmt.Errorf("cpio: bad member name %q", e.Name)
	}
	if e.Size < 0 || e.Size > 0xFFFFFFFF {
		return fmt.Errorf("cpio: %s: size %d does not fit the newc format", e.Name, e.Size)
	}
	c.ino++
	nlink := uint32(1)
	if e.Mode&unix.S_IFMT == unix.S_IFDIR {
		nlink = 2
	}
	_, c.err = fmt.Fprintf(c.w, "%s%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		cpioMagic, c.ino, e.Mode, e.UID, e.GID, nlink, c.mtime, uint32(e.Size),
		0, 0, e.RdevMajor, e.RdevMinor, len(e.Name)+1, 0)
	if c.err == nil {
		_, c.err = c.w.WriteString(e.Name)
	}
	if c.err == nil {
		c.err = c.w.WriteByte(0)
	}
	c.pad(int64(cpioHeaderLen + len(e.Name) + 1))
	return c.err
}

// Add writes a member whose data, if any, comes from data (Size bytes).
func (c *cpioWriter) Add(e cpioEntry, data io.Reader) error {
	if e.Mode&unix.S_IFMT == unix.S_IFLNK {
		e.Size = int64(len(e.LinkTarget))
		data = strings.NewReader(e.LinkTarget)
	}
	if err := c.header(&e); err != nil {
		return err
	}
	if e.Size > 0 {
		if data == nil {
			c.err = fmt.Errorf("cpio: %s: %d bytes announced, no data", e.Name, e.Size)
			return c.err
		}
		n, err := io.Copy(c.w, io.LimitReader(data, e.Size))
		if err == nil && n != e.Size {
			err = fmt.Errorf("cpio: %s: %d bytes announced, %d read (file changed while packing?)", e.Name, e.Size, n)
		}
		if err != nil {
			c.err = err
			return err
		}
	}
	c.pad(e.Size)
	return c.err
}

// Close writes the trailer and flushes; it does not close the underlying writer.
func (c *cpioWriter) Close() error {
	if err := c.header(&cpioEntry{Name: cpioTrailer}); err != nil {
		return err
	}
	return c.w.Flush()
}

// AddTree adds every file under root, in lexical order, named relative to
// root. keep decides per path (relative, slash-separated) whether it goes in;
// a rejected directory is skipped with its contents. Hard links become
// independent copies and sockets and FIFOs are left out: the guest needs
// neither. Ownership and permissions are kept.
func (c *cpioWriter) AddTree(root string, keep func(rel string, isDir bool) bool) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		if keep != nil && !keep(rel, d.IsDir()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return fmt.Errorf("cpio: stat %s: %w", path, err)
		}
		e := cpioEntry{Name: rel, Mode: st.Mode, UID: st.Uid, GID: st.Gid}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			return c.Add(e, nil)
		case unix.S_IFLNK:
			if e.LinkTarget, err = os.Readlink(path); err != nil {
				return fmt.Errorf("cpio: %w", err)
			}
			return c.Add(e, nil)
		case unix.S_IFCHR, unix.S_IFBLK:
			e.RdevMajor, e.RdevMinor = unix.Major(st.Rdev), unix.Minor(st.Rdev)
			return c.Add(e, nil)
		case unix.S_IFREG:
			f, err := os.Open(path)
			if err != nil {
				return fmt.Errorf("cpio: %w", err)
			}
			e.Size = st.Size
			err = c.Add(e, f)
			return errors.Join(err, f.Close())
		}
		return nil
	})
}
