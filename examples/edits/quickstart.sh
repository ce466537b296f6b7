#!/usr/bin/env bash
# The edits part of the demo, offline, on embedded defaults: the six drawn-shape C-VQA items with images get their
# edit instructions (embedded model: the relevant edit, which changes the answer, and an irrelevant one, which must
# not), two candidates of each (the embedded tiny InstructPix2Pix pipeline: 64x64 noise, which the edit checks
# flag). Nothing unverified is released as an edit: the first release carries no edited image (nobody accepted one;
# export says why in one line). Then hand-made edits of the same items come in (`cftools ingest edits`, made with
# Pillow: examples/edits/hand-made), are checked like generated ones and pass; a second, separately versioned
# release made with --include-unverified-edits carries them, and its card and browse.html say at the image that
# they are NOT verified by people. The blind (text-only) baseline prints the paired score and the consistency score
# on it (the answer must change on the relevant edit and stay on the irrelevant one).
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

step "Hand-made edits of the same items come in, checked like generated ones (cftools ingest edits)"
cftools ingest edits "$here/hand-made/edits.csv" --images "$here/hand-made" --licence CC0-1.0

step "A separate release with --include-unverified-edits: each best candidate without a flag, marked NOT verified"
cftools export edits --version 0.1.0-unverified-edits --include-unverified --include-unverified-edits --force \
  --licence CC0-1.0
cftools verify "$ws/releases/edits-0.1.0-unverified-edits"
grep -A1 "Edited images NOT verified by people" "$ws/releases/edits-0.1.0-unverified-edits/README.md" || true

step "Blind (text-only) baseline on it: the paired and consistency scores are their floor"
cftools eval "$ws/releases/edits-0.1.0-unverified-edits" --model blind
# the console shows the kind's main table; the paired and consistency scores are in the run's report.md
for heading in "about the edited image" "consistency"; do
  awk -v h="$heading" 'index($0, h) && /^#/ {show = 1} show && /^$/ && table {exit} show {print; if (/^\|/) table = 1}' \
    "$ws"/runs/edits-0.1.0-unverified-edits--blind--*/report.md
done
