package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/user"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/ndk/daemon"
)

// The operator's commands (status, info, stats, qp, dump) read a running
// daemon through its socket (ndk/daemon's admin requests): the daemon owns
// the interface, so what they show is what it runs.

// opsFlags are the flags every operator command takes.
type opsFlags struct {
	dev, socket string
	json        bool
}

func (o *opsFlags) register(fs *flag.FlagSet, listing bool) {
	fs.StringVar(&o.dev, "dev", "", "interface whose daemon to ask (its socket is /run/ndkxdp/IF.sock)")
	fs.StringVar(&o.socket, "daemon", "", "socket of the daemon to ask (instead of -dev)")
	if listing {
		fs.BoolVar(&o.json, "j", false, "print JSON")
	}
}

// path returns the daemon socket the flags name.
func (o *opsFlags) path() (string, error) {
	switch {
	case o.socket != "" && o.dev != "":
		return "", usagef("give -dev or -daemon, not both")
	case o.socket != "":
		return o.socket, nil
	case o.dev != "":
		return daemon.SocketPath(o.dev), nil
	}
	return "", usagef("-dev IF or -daemon SOCKET is required")
}

// query asks the daemon for op into out, bounded in time.
func (o *opsFlags) query(ctx context.Context, op string, out any) error {
	p, err := o.path()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return socketError(p, daemon.Query(ctx, p, op, out))
}

// socketError says what a refused socket means: its permissions, not a
// missing capability (which describe would suggest for EACCES).
func socketError(path string, err error) error {
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
		return fmt.Errorf("%s: permission denied (EACCES): %s", path, socketAccessHint(path))
	}
	return err
}

// socketAccessHint names who may use the daemon's socket at path, and how
// this user becomes one of them.
func socketAccessHint(path string) string {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return "the daemon's socket admits root and the members of its socket group (the daemon's -group, socket_group); join that group, or run as root"
	}
	group := strconv.FormatUint(uint64(st.Gid), 10)
	if g, err := user.LookupGroupId(group); err == nil {
		group = g.Name
	}
	return fmt.Sprintf("the daemon's socket (mode %04o) admits its owner and the members of group %s (the daemon's -group, socket_group): add this user to it (usermod -aG %s USER, then log in again), or run as root",
		st.Mode&0o777, group, group)
}

func printJSON(w io.Writer, v any) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(v)
}

// parseOps parses an operator command's flags (the conventions of
// parseFlags: -h on stdout, a bad flag exits 2).
func parseOps(name, about string, args []string, stdout, stderr io.Writer, listing bool) (*opsFlags, error) {
	j := ""
	if listing {
		j = " [-j]"
	}
	fs := newFlagSet(name, fmt.Sprintf("usage: ndkxdp %s -dev IF|-daemon SOCKET%s\n\n%s", name, j, about), stderr)
	o := &opsFlags{}
	o.register(fs, listing)
	if err := parseFlags(fs, args, stdout); err != nil {
		return nil, err
	}
	if _, err := o.path(); err != nil {
		return nil, err
	}
	return o, nil
}
