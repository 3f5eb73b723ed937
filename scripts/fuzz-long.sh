#!/usr/bin/env bash
# Runs every fuzz target in the module for DURATION each (a Go duration:
# 10m, 2h; default 10m), one after another, and lists the targets that
# failed. A failing input is written to the package's testdata/fuzz, where
# `go test` replays it from then on. CI runs the same targets for 20 s each
# (.ci/run).
#
#   scripts/fuzz-long.sh 30m           every target, 30 minutes each
#   scripts/fuzz-long.sh 1h ./ndk/...  only the targets under ./ndk
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-10m}
shift || true
pkgs=("${@:-./...}")
failed=()
n=0
for pkg in $(go list "${pkgs[@]}"); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
		n=$((n + 1))
		printf '\n=== %s %s for %s (%s)\n' "$pkg" "$f" "$duration" "$(date -u +%H:%M:%S)"
		out=$(go test -run '^$' -fuzz "^${f}\$" -fuzztime "$duration" "$pkg" 2>&1) && { tail -n 3 <<<"$out"; continue; }
		echo "$out" | tail -n 30
		# Go 1.26's coordinator may report its own deadline as a failure
		# (go.dev/issue/75804): no input written, nothing to replay.
		if grep -q 'context deadline exceeded' <<<"$out" && ! grep -qE 'Failing input written|panic:' <<<"$out"; then
			echo "($f ended on the -fuzztime deadline race, go.dev/issue/75804: not a finding)"
			continue
		fi
		failed+=("$pkg $f")
	done
done
printf '\n%d fuzz targets, %s each: %d failed\n' "$n" "$duration" "${#failed[@]}"
for x in "${failed[@]}"; do
	echo "FAIL $x"
done
[ "${#failed[@]}" -eq 0 ]
