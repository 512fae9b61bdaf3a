#!/usr/bin/env bash
# Build the Volcano oracle used by tools/volcano_differential.py, offline:
#
#   VOLCANO_MIRROR=<git dir of volcano-sh/volcano> tools/volcano_oracle/build.sh
#   # -> ~/.cache/gangsched-volcano-oracle/bin/volcano-oracle
#
# Needs Debian's golang-1.19 and a git mirror of volcano-sh/volcano. Volcano's tree at one
# commit is extracted under the cache folder (never into this repository), later.patch adds
# its off-by-default switches (the emulated later upstream changes, `-fix`), and the harness
# beside this script is copied in as cmd/oracle/ so its imports resolve through Volcano's
# go.mod and vendor/ (complete at that commit: nothing is downloaded).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
MIRROR=${VOLCANO_MIRROR:?set VOLCANO_MIRROR to the git directory of a volcano-sh/volcano mirror}
COMMIT=${VOLCANO_COMMIT:-67e339c04}   # April 2023, Go 1.19, the last commit with a complete vendor/
CACHE=${VOLCANO_ORACLE_CACHE:-$HOME/.cache/gangsched-volcano-oracle}
GO=${GO:-/usr/lib/go-1.19/bin/go}
SRC=$CACHE/src

[ -x "$GO" ] || { echo "build.sh: no Go 1.19 at $GO (apt-get install -y golang-1.19)" >&2; exit 1; }
full=$(git -C "$MIRROR" rev-parse "$COMMIT^{commit}")
stamp="$full+$(sha256sum "$HERE/later.patch" | cut -c1-12)"
if [ ! -f "$SRC/.oracle-commit" ] || [ "$(cat "$SRC/.oracle-commit")" != "$stamp" ]; then
  rm -rf "$SRC.tmp" && mkdir -p "$SRC.tmp"
  git -C "$MIRROR" archive "$full" | tar -x -C "$SRC.tmp"
  (cd "$SRC.tmp" && patch -p1 --quiet <"$HERE/later.patch")
  echo "$stamp" >"$SRC.tmp/.oracle-commit"
  rm -rf "$SRC" && mv "$SRC.tmp" "$SRC"
fi
mkdir -p "$SRC/cmd/oracle" "$CACHE/bin"
rm -f "$SRC/cmd/oracle/"*.go
cp "$HERE"/*.go "$SRC/cmd/oracle/"

export GOFLAGS=-mod=vendor GOPROXY=off GOTOOLCHAIN=local GOSUMDB=off CGO_ENABLED=0
export GOCACHE=$CACHE/gocache GOPATH=$CACHE/gopath
cd "$SRC"
"$GO" vet ./cmd/oracle
"$GO" build -trimpath -o "$CACHE/bin/volcano-oracle" \
  -ldflags "-X main.volcanoCommit=$full+later.patch -X main.volcanoDescribe=extended" ./cmd/oracle
echo "$CACHE/bin/volcano-oracle"
