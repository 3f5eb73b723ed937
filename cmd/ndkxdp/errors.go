package main

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/ndk"
)

// linuxTerm is how Linux names a failure that ndk reports as an NTSTATUS:
// the errno a librdmacm or socket call would give, and what a person can
// do about it.
type linuxTerm struct {
	errno string
	hint  string
}

var linuxTerms = map[ndk.Status]linuxTerm{
	ndk.StatusInvalidParameter:      {"EINVAL", ""},
	ndk.StatusInsufficientResources: {"ENOMEM", "lower the queue depths or sizes, or raise the memlock limit (ulimit -l)"},
	ndk.StatusIOTimeout:             {"ETIMEDOUT", "the peer stopped answering: is it still running, and is the link up?"},
	ndk.StatusConnectionRefused:     {"ECONNREFUSED", "is a server listening on that address and port (ndkxdp rping -s, rping -s, ib_send_bw -R)?"},
	ndk.StatusConnectionAborted:     {"ECONNABORTED", "the peer ended the connection"},
	ndk.StatusConnectionInvalid:     {"ENOTCONN", "the connection is gone"},
	ndk.StatusNetworkUnreachable:    {"ENETUNREACH", "no route to the peer leaves through -dev: check `ip route get ADDR`"},
	ndk.StatusHostUnreachable:       {"EHOSTUNREACH", "nobody answered ARP or neighbour discovery for the peer: check the address and that the peer is up"},
	ndk.StatusInvalidAddress:        {"EADDRNOTAVAIL", "use an address of -dev (`ip addr show DEV`)"},
	ndk.StatusAddressAlreadyExists:  {"EADDRINUSE", "another listener or connection holds that address and port"},
	ndk.StatusSharingViolation:      {"EADDRINUSE", "another listener or connection holds that address and port"},
	ndk.StatusCancelled:             {"ECANCELED", ""},
	ndk.StatusNotSupported:          {"EOPNOTSUPP", ""},
	ndk.StatusNDISAdapterNotReady:   {"ENODEV", "check -dev: `ip link` lists the interfaces of this network namespace"},
	ndk.StatusAccessViolation:       {"EACCES", "the peer refused the memory access (token, bounds or rights)"},
	ndk.StatusRemoteResources:       {"EREMOTEIO", "the peer could not carry out the request"},
	ndk.StatusBufferOverflow:        {"EMSGSIZE", "a message was larger than the receive buffer"},
	ndk.StatusConnectionReset:       {"ECONNRESET", "the daemon stopped or died: its log (journalctl -u ndkxdp@IF) says why; start it again and rerun"},
}

// ntText matches the NTSTATUS annotations ndk's errors carry for
// programs (errors.Is, ndk.StatusOf) and the package prefixes of the
// layers below the command.
var ntText = regexp.MustCompile(`\s*\((?:NTSTATUS 0x[0-9a-fA-F]+ [A-Z_]+|(?:NDIS_)?STATUS_[A-Z_]+|NTSTATUS\(0x[0-9a-fA-F]+\))\)|\b(?:ndk|cm|ndkverbs): `)

// describe renders err for a person: what failed, in Linux terms (the
// errno name a Linux RDMA tool would print), and what to do. Programs
// keep the NTSTATUS through errors.Is on the error itself.
func describe(err error) string {
	var te *timeoutError
	if errors.As(err, &te) {
		return te.Error() + " (ETIMEDOUT)"
	}
	msg := dedupe(ntText.ReplaceAllString(shortLog(err.Error()), ""))
	// A system call's errno, where one caused the failure, names it
	// better than the NTSTATUS ndk chose for the whole call.
	var errno syscall.Errno
	if errors.As(err, &errno) {
		msg += " (" + unix.ErrnoName(errno) + ")"
		if errno == unix.EPERM || errno == unix.EACCES {
			msg += "; the kernel refused: run as root, or with " + cmdline.CapNames(cmdline.ToolCaps)
		}
		return msg
	}
	var ne *ndk.Error
	if !errors.As(err, &ne) {
		return msg
	}
	t, ok := linuxTerms[ne.Status]
	if !ok {
		return msg
	}
	msg += " (" + t.errno + ")"
	if t.hint != "" {
		msg += "; " + t.hint
	}
	return msg
}

// shortLog keeps the first line of a message that carries a log (the
// verifier's), and the log's last lines, which give its reason.
func shortLog(msg string) string {
	lines := strings.Split(strings.TrimRight(msg, "\n"), "\n")
	if len(lines) <= 3 {
		return msg
	}
	tail := lines[len(lines)-2:]
	for i := range tail {
		tail[i] = strings.TrimSpace(tail[i])
	}
	return fmt.Sprintf("%s [... %d lines ...] %s", lines[0], len(lines)-3, strings.Join(tail, " / "))
}

// dedupe drops a step that repeats the one before it ("accept: accept:
// ..."), which happens where two layers name the same call.
func dedupe(msg string) string {
	parts := strings.Split(msg, ": ")
	out := parts[:0]
	for _, p := range parts {
		if len(out) > 0 && p == out[len(out)-1] {
			continue
		}
		out = append(out, p)
	}
	return strings.Join(out, ": ")
}
