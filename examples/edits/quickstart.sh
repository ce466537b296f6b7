#!/usr/bin/env bash
# The edits part of the demo, offline, on embedded defaults: the six drawn-shape C-VQA items with images get an edit
# instruction each (embedded model), two edited candidates each (the embedded tiny InstructPix2Pix pipeline: 64x64
# noise), the edit checks rank them. Nothing unverified is released as an edit: the release carries no edited image
# (nobody accepted one; export says why in one line). A second, separately versioned release made with
# --include-unverified-edits shows what that flag does: its card and browse.html say the edits are NOT verified, and
# the blind (text-only) baseline prints the paired score on it (original question about the original and about the
# edited image, both right).
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

step "Export the release: only edits two people accepted travel with their items (none yet: export says why)"
cftools export edits --version 0.1.0 --include-unverified --force --licence CC0-1.0
cftools verify "$ws/releases/edits-0.1.0"

step "Demo only: waive the candidates' edit flags, as a person who looked at them could (cftools flags waive)"
# The embedded pipeline's noise is flagged by the edit checks, and a flagged candidate is never released as an edit,
# even with --include-unverified-edits; so that the next release has edits to show, the demo waives those flags.
cftools flags list --json | python3 -c '
import json, sys
for row in json.load(sys.stdin):
    if str(row.get("code", "")).startswith("edit_"):
        print(row["item"], row["code"])' | sort -u | while read -r item code; do
  cftools flags waive "$item" "$code" --reason "demo: the embedded editor makes noise; waived to show an unverified release" >/dev/null
done

step "A separate release with --include-unverified-edits: the best candidates without an unwaived flag, marked NOT verified"
cftools export edits --version 0.1.0-unverified-edits --include-unverified --include-unverified-edits --force \
  --licence CC0-1.0
cftools verify "$ws/releases/edits-0.1.0-unverified-edits"
grep -A1 "Edited images NOT verified by people" "$ws/releases/edits-0.1.0-unverified-edits/README.md" || true

step "Blind (text-only) baseline on it: the paired score is its floor"
cftools eval "$ws/releases/edits-0.1.0-unverified-edits" --model blind
# the console shows the kind's main table; the paired score is in the run's report.md
awk '/about the edited image/ {show = 1} show && /^$/ && table {exit} show {print; if (/^\|/) table = 1}' \
  "$ws"/runs/edits-0.1.0-unverified-edits--blind--*/report.md
