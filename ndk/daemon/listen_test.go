package daemon_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ndkxdp/ndkxdp/ndk/daemon"
)

// TestListenReplacesOnlyAStaleSocket: the daemon's socket path replaces
// a socket nobody listens on, and refuses, leaving it as it is, a regular
// file, an empty directory, another program's listening socket and a
// live daemon's.
func TestListenReplacesOnlyAStaleSocket(t *testing.T) {
	tests := []struct {
		name   string
		put    func(t *testing.T, path string)
		refuse string // "" = replaced
	}{
		{"nothing", func(*testing.T, string) {}, ""},
		{"stale socket", func(t *testing.T, path string) {
			l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
			if err != nil {
				t.Fatal(err)
			}
			l.SetUnlinkOnClose(false) // as a daemon killed with SIGKILL leaves it
			l.Close()
		}, ""},
		{"regular file", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("keep"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "a regular file is there"},
		{"empty directory", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}, "a directory is there"},
		{"another program's socket", func(t *testing.T, path string) {
			l, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
		}, "another program's socket"},
		{"a live daemon's", func(t *testing.T, path string) {
			l, err := daemon.Listen(path, 0o600, -1)
			if err != nil {
				t.Fatal(err)
			}
			l.SetUnlinkOnClose(false)
			t.Cleanup(func() { l.Close() })
		}, "a daemon already listens there"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "d.sock")
			tc.put(t, path)
			before, _ := os.Lstat(path)
			l, err := daemon.Listen(path, 0o600, -1)
			if tc.refuse == "" {
				if err != nil {
					t.Fatalf("Listen: %v", err)
				}
				l.Close()
				return
			}
			if err == nil {
				l.Close()
				t.Fatalf("Listen replaced a %s", tc.name)
			}
			if !strings.Contains(err.Error(), tc.refuse) {
				t.Errorf("Listen: %v, want %q", err, tc.refuse)
			}
			after, aerr := os.Lstat(path)
			if aerr != nil || !os.SameFile(before, after) {
				t.Errorf("the %s was not left as it was: %v", tc.name, aerr)
			}
		})
	}
}
