#!/usr/bin/env bash
# The main job on the shipped example, offline: workspace -> ingest -> status.
# Run by `make demo` (see README). WORKSPACE defaults to ./demo-workspace.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
ws="${WORKSPACE:-$PWD/demo-workspace}"
export CFTOOLS_WORKSPACE="$ws"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "Create the workspace at $ws"
cftools init "$ws"

step "Ingest the C-VQA sample (300 published rows, images not shipped) and the VQAv2-format example"
cftools ingest cvqa "$here/cvqa/C-VQA-Real_questions.csv"
cftools ingest vqav2 --questions "$here/vqav2/questions.json" --annotations "$here/vqav2/annotations.json" \
  --images "$here/vqav2/images"

step "What the store holds"
cftools status
