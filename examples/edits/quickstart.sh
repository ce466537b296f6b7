#!/usr/bin/env bash
# The edits part of the demo, offline, on embedded defaults: the six drawn-shape C-VQA items with images get an edit
# instruction each (embedded model), two edited candidates each (the embedded tiny InstructPix2Pix pipeline: 64x64
# noise), the edit checks rank them; an unverified release carries the edits, and the blind (text-only) baseline
# prints the paired score (original question about the original and about the edited image, both right).
# WORKSPACE defaults to ./demo-workspace-edits (an existing workspace is reused).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
ws="${WORKSPACE:-$PWD/demo-workspace-edits}"
export CFTOOLS_WORKSPACE="$ws"

source "$here/../steps.sh"  # step, model_step

step "Workspace at $ws"
[ -f "$ws/cftools.toml" ] || cftools init "$ws"

step "Ingest the six drawn-shape C-VQA items (with images)"
cftools ingest cvqa "$here/../cvqa/drawn-shapes.csv" --images "$here/../vqav2/images" --licence CC0-1.0

step "Edit instructions (embedded model), two candidates per item (embedded tiny edit pipeline), edit checks"
model_step cftools generate edits --kind cvqa --per-item 2 --max-attempts 2

step "Export an unverified release with the edits, and verify it"
cftools export edits --version 0.1.0 --include-unverified --force --licence CC0-1.0
cftools verify "$ws/releases/edits-0.1.0"

step "Blind (text-only) baseline: the paired score is its floor"
cftools eval "$ws/releases/edits-0.1.0" --model blind
# the console shows the kind's main table; the paired score is in the run's report.md
awk '/about the edited image/ {show = 1} show && /^$/ && table {exit} show {print; if (/^\|/) table = 1}' \
  "$ws"/runs/edits-0.1.0--blind--*/report.md
