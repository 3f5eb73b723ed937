#!/usr/bin/env bash
# Installs what ndkxdp needs on a fresh Debian 12 machine (run as root).
# Go itself is expected at /usr/local/go or on PATH (go.mod names the version).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
pkgs=(
	iproute2        # ip netns exec, used by the test harness and tools
	iputils-ping    # ping across the veth pair in the end-to-end tests
	clang-14 llvm   # the pinned BPF compiler and llvm-strip (bpf/ regeneration check)
	libbpf-dev      # bpf_helpers.h for the XDP program
	linux-libc-dev  # kernel uapi headers
	tshark          # decodes captured RoCEv2 frames in tests
	ca-certificates git
	qemu-system-x86 # boots the Soft-RoCE peer VM (test/interop)
	mmdebstrap      # builds the peer VM's Debian 12 root file system
	zstd            # compresses the peer VM's initramfs
	cpio            # cross-checks the initramfs writer in test/interop
	systemd         # systemd-analyze verify checks packaging/ndkxdp@.service
)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	echo "setup: installing ${missing[*]}"
	apt-get update -q
	# tshark asks whether non-root users may capture; answer no without a prompt.
	echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
	apt-get install -y -q --no-install-recommends "${missing[@]}"
else
	echo "setup: all packages present"
fi
if ! grep -q " /sys/fs/bpf bpf " /proc/mounts; then
	mkdir -p /sys/fs/bpf
	mount -t bpf bpf /sys/fs/bpf
fi
