package interop

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSystemdImageInputs(t *testing.T) {
	peer := (&ImageConfig{}).withDefaults()
	host := (&ImageConfig{Systemd: true}).withDefaults()
	if host.Suite != SystemdSuite || !slices.Equal(host.Packages, SystemdPackages) {
		t.Errorf("systemd image defaults: suite %s, packages %v", host.Suite, host.Packages)
	}
	if !slices.Equal(modulesOf(host), systemdModules) || !slices.Equal(modulesOf(peer), guestModules) {
		t.Errorf("modules: systemd %v, peer %v", modulesOf(host), modulesOf(peer))
	}
	hPeer, _ := inputHash(peer, nil)
	h0, _ := inputHash(host, nil)
	// Same suite and packages as the peer, systemd only: still another image.
	samePkgs := peer
	samePkgs.Systemd = true
	hSame, _ := inputHash(samePkgs, nil)
	unit0, init0 := agentUnit, systemdInit
	defer func() { agentUnit, systemdInit = unit0, init0 }()
	agentUnit = append(slices.Clone(unit0), '\n')
	hUnit, _ := inputHash(host, nil)
	agentUnit, systemdInit = unit0, append(slices.Clone(init0), '\n')
	hInit, _ := inputHash(host, nil)
	for name, h := range map[string]string{"peer image": hPeer, "systemd flag": hSame, "agent unit": hUnit, "systemd init": hInit} {
		if h == h0 {
			t.Errorf("the %s has the systemd image's hash", name)
		}
	}
	// The peer's hash does not depend on what only the systemd image has.
	agentUnit = append(slices.Clone(unit0), '\n')
	if h, _ := inputHash(peer, nil); h != hPeer {
		t.Error("the agent unit or the systemd init changed the peer image's hash")
	}
}

func TestInstallAgentService(t *testing.T) {
	root := t.TempDir()
	if err := installAgentService(root); err != nil {
		t.Fatal(err)
	}
	agent, err := os.ReadFile(filepath.Join(root, agentPath))
	if err != nil || !bytes.Equal(agent, guestInit) {
		t.Fatalf("agent: %v (same as guest/init: %v)", err, bytes.Equal(agent, guestInit))
	}
	if st, _ := os.Stat(filepath.Join(root, agentPath)); st.Mode().Perm() != 0o755 {
		t.Errorf("agent mode %v", st.Mode())
	}
	unit, err := os.ReadFile(filepath.Join(root, "etc/systemd/system/multi-user.target.wants/ndkxdp-agent.service"))
	if err != nil || !bytes.Equal(unit, agentUnit) {
		t.Fatalf("enabled unit: %v", err)
	}
	if !strings.Contains(string(agentUnit), "ExecStart="+agentPath+"\n") {
		t.Errorf("the agent unit does not run %s:\n%s", agentPath, agentUnit)
	}
}

func TestWriteInitrdPrependsFiles(t *testing.T) {
	dir := t.TempDir()
	image := []byte("(\xb5/\xfd the image's own compressed archive")
	imgPath := filepath.Join(dir, "initrd.zst")
	if err := os.WriteFile(imgPath, image, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "initrd")
	files := []File{
		{Path: "/usr/local/bin/tool", Mode: 0o755, Data: []byte("binary")},
		{Path: "/etc/tool/conf.json", Mode: 0o644, Data: []byte("{}")},
	}
	if err := writeInitrd(out, imgPath, files); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(b, image) {
		t.Fatal("the image's archive does not follow unchanged")
	}
	members, err := readNewc(b[:len(b)-len(image)])
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range members {
		got = append(got, m.name)
	}
	// Every directory before what it holds, then the files.
	want := []string{"usr", "etc", "usr/local", "etc/tool", "usr/local/bin", "usr/local/bin/tool", "etc/tool/conf.json"}
	if !slices.Equal(got, want) {
		t.Fatalf("members %v, want %v", got, want)
	}
	for _, m := range members {
		switch m.name {
		case "usr/local/bin/tool":
			if m.mode != unix.S_IFREG|0o755 || string(m.data) != "binary" {
				t.Errorf("%s: mode %o data %q", m.name, m.mode, m.data)
			}
		case "etc/tool/conf.json":
			if m.mode != unix.S_IFREG|0o644 || string(m.data) != "{}" {
				t.Errorf("%s: mode %o data %q", m.name, m.mode, m.data)
			}
		default:
			if m.mode != unix.S_IFDIR|0o755 {
				t.Errorf("%s: mode %o, want a directory", m.name, m.mode)
			}
		}
	}
	for _, p := range []string{"relative/path", "/a/../b", "/"} {
		if err := writeInitrd(out, imgPath, []File{{Path: p, Mode: 0o644}}); err == nil {
			t.Errorf("path %q accepted", p)
		}
	}
}

func TestIsBuiltin(t *testing.T) {
	builtin := []byte("kernel/drivers/char/virtio_console.ko\nkernel/drivers/virtio/virtio-mmio.ko\n")
	for _, tc := range []struct {
		module string
		want   bool
	}{
		{"virtio_console", true},
		{"virtio_mmio", true},
		{"virtio-mmio", true},
		{"virtio_net", false},
		{"virtio", false},
	} {
		if got := isBuiltin(builtin, tc.module); got != tc.want {
			t.Errorf("isBuiltin(%s) = %v, want %v", tc.module, got, tc.want)
		}
	}
}
