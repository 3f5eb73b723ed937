package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/internal/hook"
	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
	"github.com/ndkxdp/ndkxdp/ndk/internal/shm"
)

// Config configures a Server.
type Config struct {
	// Logger receives the daemon's log; nil discards it.
	Logger *slog.Logger
	// Allow, if it names any user or group, admits only the peers it
	// names, beyond the socket file's permissions; root and the daemon's
	// own user are always admitted.
	Allow Allow
	// Interface, Version and MetricsAddr are what the operator requests
	// report (admin.go): the interface served, the daemon's version and
	// where /metrics is served ("" or nil: not served).
	Interface   string
	Version     string
	MetricsAddr func() string
	// Quotas bound what clients take (quota.go); the zero value is
	// DefaultQuotas.
	Quotas Quotas
}

// backend is the daemon's typed seam into the adapter it serves.
type backend = hook.Backend[*ndk.Adapter, *ndk.PD, *ndk.MR, *ndk.MW, *ndk.CQ, *ndk.QP]

// Server serves one adapter to client processes.
type Server struct {
	a   *ndk.Adapter
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	closed   bool
	sessions map[*session]struct{}
	lns      []*net.UnixListener
	wg       sync.WaitGroup
	started  time.Time
	// clientsServed counts the sessions that said hello; an operator's
	// (admin.go) says none.
	clientsServed atomic.Uint64
	cqRings       atomic.Uint64 // RelayRings
	ended         endCounts     // sessions the daemon ended, by reason
	book          *book         // the quotas' accounts
	be            backend       // the seam into the adapter's provider
	refused       atomic.Uint64 // peers the allow list refused
	brokenRings   atomic.Uint64 // client QP and SRQ rings read no more for what the client wrote
}

// RelayRings counts the notifications of the daemon's own CQs that rang
// a relay: completions another queue's engine made while queue 0's slept,
// or an error. A one-queue daemon makes every completion in the relay's
// own loop and arms its CQs for errors only before it sleeps, so this
// stays zero there; each ring costs a goroutine, and on an idle P a
// thread woken on another CPU.
func (s *Server) RelayRings() uint64 { return s.cqRings.Load() }

// New returns a server for a, which it does not close.
func New(a *ndk.Adapter, cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Server{a: a, cfg: cfg, log: cfg.Logger, sessions: make(map[*session]struct{}), started: time.Now(), book: newBook(cfg.Quotas),
		be: hook.Get[*ndk.Adapter, *ndk.PD, *ndk.MR, *ndk.MW, *ndk.CQ, *ndk.QP]()}
}

// Listen creates the daemon's socket at path, a SOCK_SEQPACKET unix socket
// with mode perm and, if gid >= 0, that owning group. Only a stale socket
// is replaced: a SOCK_SEQPACKET socket file nobody listens on, as a daemon
// that died leaves. Anything else at path (a file, a directory, a socket
// someone listens on) is refused: the daemon runs as root, and path is
// the operator's to give.
func Listen(path string, perm os.FileMode, gid int) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	if err := removeStale(path); err != nil {
		return nil, err
	}
	// The socket is created with the final mode: no window in which
	// others could connect.
	old := unix.Umask(0o777 &^ int(perm))
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(true)
	if gid >= 0 {
		if err := os.Chown(path, -1, gid); err != nil {
			ln.Close()
			return nil, fmt.Errorf("socket group: %w", err)
		}
	}
	if err := os.Chmod(path, perm); err != nil {
		ln.Close()
		return nil, fmt.Errorf("socket mode: %w", err)
	}
	return ln, nil
}

// removeStale removes the socket a dead daemon left at path, and refuses
// anything else there.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("socket %s: %w", path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("socket %s: a %s is there, not a daemon's socket (EEXIST): left as it is; remove it or give another -socket", path, typeName(fi.Mode()))
	}
	c, err := net.DialTimeout("unixpacket", path, time.Second)
	switch {
	case err == nil:
		c.Close()
		return fmt.Errorf("socket %s: a daemon already listens there (EADDRINUSE)", path)
	case errors.Is(err, unix.EPROTOTYPE):
		return fmt.Errorf("socket %s: another program's socket (not SOCK_SEQPACKET) listens there (EADDRINUSE): left as it is; give another -socket", path)
	case !errors.Is(err, unix.ECONNREFUSED):
		return fmt.Errorf("socket %s: cannot tell whether it is stale: %w; left as it is", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("socket %s: remove the stale socket: %w", path, err)
	}
	return nil
}

// typeName names a file's type for an operator.
func typeName(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m.IsRegular():
		return "regular file"
	case m&os.ModeSymlink != 0:
		return "symbolic link"
	case m&os.ModeNamedPipe != 0:
		return "named pipe"
	case m&os.ModeDevice != 0:
		return "device"
	}
	return "file of type " + m.Type().String()
}

// Serve accepts clients on ln until Close (it returns nil then) or an
// accept error.
func (s *Server) Serve(ln *net.UnixListener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	s.lns = append(s.lns, ln)
	s.mu.Unlock()
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("accept: %w", err)
		}
		s.start(c)
	}
}

func (s *Server) start(c *net.UnixConn) {
	cred, err := peerCred(c)
	if err != nil {
		s.log.Warn("client refused: no peer credentials", "err", err)
		c.Close()
		return
	}
	if !s.cfg.Allow.admits(cred, c) {
		err := statusErr(ndk.StatusAccessDenied, "uid %d (gid %d) is not on the daemon's allow list: ask its operator to add the user or one of its groups (config allow_users, allow_groups)", cred.Uid, cred.Gid)
		s.log.Warn("client refused: not on the allow list", "pid", cred.Pid, "uid", cred.Uid, "gid", cred.Gid)
		s.refused.Add(1)
		go refuse(c, err)
		return
	}
	if err := s.book.openSession(cred.Uid); err != nil {
		s.log.Warn("client refused", "pid", cred.Pid, "uid", cred.Uid, "err", err)
		go refuse(c, err)
		return
	}
	ss := newSession(s, c, cred)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.book.closeSession(cred.Uid, &ss.held)
		c.Close()
		return
	}
	s.sessions[ss] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	s.log.Info("client connected", "pid", cred.Pid, "uid", cred.Uid)
	go func() {
		defer s.wg.Done()
		ss.serve()
		s.mu.Lock()
		delete(s.sessions, ss)
		s.mu.Unlock()
		s.log.Info("client gone", "pid", cred.Pid)
	}()
}

// refuse answers the first request of a connection the daemon will not
// serve with err, so that the client reads why, and closes it.
func refuse(c *net.UnixConn, err error) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	buf := make([]byte, proto.MaxMessage)
	n, fds, rerr := shm.RecvFDs(c, buf, shm.MaxFDs)
	closeFDs(fds)
	if rerr != nil || n == 0 {
		return
	}
	m := &proto.Message{}
	if req, derr := proto.DecodeHeader(buf[:n]); derr == nil {
		m.ID = req.ID
	}
	setErr(m, err)
	if b, merr := json.Marshal(m); merr == nil {
		_ = shm.SendFDs(c, b)
	}
}

func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, cerr
}

// Clients returns how many client processes are connected now.
func (s *Server) Clients() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// Close stops accepting, ends every client's session as if the client
// had died (connections disconnected, QPs flushed and closed, memory
// unmapped), and waits for them. The adapter stays open.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	lns := s.lns
	var ss []*session
	for x := range s.sessions {
		ss = append(ss, x)
	}
	s.mu.Unlock()
	for _, ln := range lns {
		ln.Close()
	}
	for _, x := range ss {
		x.kill()
	}
	s.wg.Wait()
}

// Shutdown is Close with a bound: it returns ctx's error if the sessions
// have not ended by then.
func (s *Server) Shutdown(ctx context.Context) error {
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
