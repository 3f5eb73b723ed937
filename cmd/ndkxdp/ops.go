package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
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
		return "", cmdline.Usagef("give -dev or -daemon, not both")
	case o.socket != "":
		return o.socket, nil
	case o.dev != "":
		return daemon.SocketPath(o.dev), nil
	}
	return "", cmdline.Usagef("-dev IF or -daemon SOCKET is required")
}

// query asks the daemon for op into out, bounded in time.
func (o *opsFlags) query(ctx context.Context, op string, out any) error {
	p, err := o.path()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return cmdline.SocketError(p, daemon.Query(ctx, p, op, out))
}

func printJSON(w io.Writer, v any) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(v)
}

// parseOps parses an operator command's flags (the conventions of
// cmdline.ParseFlags: -h on stdout, a bad flag exits 2).
func parseOps(name, about string, args []string, stdout, stderr io.Writer, listing bool) (*opsFlags, error) {
	j := ""
	if listing {
		j = " [-j]"
	}
	fs := cmdline.NewFlagSet(name, fmt.Sprintf("usage: ndkxdp %s -dev IF|-daemon SOCKET%s\n\n%s", name, j, about), stderr)
	o := &opsFlags{}
	o.register(fs, listing)
	if err := cmdline.ParseFlags(fs, args, stdout); err != nil {
		return nil, err
	}
	if _, err := o.path(); err != nil {
		return nil, err
	}
	return o, nil
}
