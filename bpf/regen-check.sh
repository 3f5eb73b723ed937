#!/usr/bin/env bash
# Regenerates the BPF objects in a temporary copy of the module (a different
# path, as a fresh CI clone would be) with the pinned compiler, and fails if
# they differ from the committed ones by a single byte.
#
# Usage: bpf/regen-check.sh   (from anywhere inside the repository)
set -euo pipefail

cc=clang-14
for tool in "$cc" llvm-strip go; do
	command -v "$tool" >/dev/null || { echo "regen-check: $tool not on PATH (pinned BPF toolchain: Debian 12 clang-14, llvm)" >&2; exit 1; }
done

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The module files plus bpf/ are all go generate needs; nothing else of the
# tree is copied, so parallel edits elsewhere cannot break the check.
mkdir "$tmp/bpf"
cp "$top/go.mod" "$top/go.sum" "$tmp/"
cp "$here"/*.c "$here"/*.go "$tmp/bpf/"
rm -f "$tmp"/bpf/*_bpfel.go "$tmp"/bpf/*_bpfel.o

(cd "$tmp/bpf" && go generate)

status=0
for f in "$here"/*_bpfel.go "$here"/*_bpfel.o; do
	name=$(basename "$f")
	if ! cmp -s "$f" "$tmp/bpf/$name"; then
		echo "regen-check: bpf/$name differs from a fresh '$cc' build; run 'go generate ./bpf' and commit" >&2
		status=1
	fi
done
for f in "$tmp"/bpf/*_bpfel.go "$tmp"/bpf/*_bpfel.o; do
	[ -e "$here/$(basename "$f")" ] || { echo "regen-check: bpf/$(basename "$f") is generated but not committed" >&2; status=1; }
done
[ $status -eq 0 ] && echo "regen-check: committed BPF objects match a fresh build"
exit $status
