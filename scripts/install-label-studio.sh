#!/usr/bin/env bash
# Install the Label Studio server that the annotation tests start, in its own virtual environment
# (the server pins openai<2; the toolkit does not). Idempotent: an existing, working venv is kept.
# Prints the path of the `label-studio` binary on its last line: export it as LS_BIN.
set -euo pipefail

LS_VERSION="1.23.2"   # pinned: an unpinned install can backtrack to an old, incompatible release
VENV="${CFTOOLS_LS_VENV:-$HOME/.cache/cftools/label-studio-venv}"
PYTHON="${PYTHON:-python3}"
BIN="$VENV/bin/label-studio"

installed_version() {
  "$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("label-studio"))' 2>/dev/null || true
}

if [ -x "$BIN" ] && [ "$(installed_version)" = "$LS_VERSION" ]; then
  echo "Label Studio $LS_VERSION already installed in $VENV" >&2
else
  echo "Installing Label Studio $LS_VERSION into $VENV ..." >&2
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip >&2
  "$VENV/bin/python" -m pip install --quiet "label-studio==$LS_VERSION" >&2
  [ "$(installed_version)" = "$LS_VERSION" ] || { echo "label-studio $LS_VERSION did not install" >&2; exit 1; }
fi
echo "$BIN"
