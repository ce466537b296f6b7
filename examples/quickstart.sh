#!/usr/bin/env bash
# The main job on the shipped example, offline, on embedded defaults (SQLite store, the bundled small model):
# workspace -> ingest -> generate -> check -> annotate (if a server is configured) -> export -> verify -> eval.
# Run by `make demo` (see README). WORKSPACE defaults to ./demo-workspace; N items per generated group.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
ws="${WORKSPACE:-$PWD/demo-workspace}"
per_group="${N:-2}"
export CFTOOLS_WORKSPACE="$ws"

source "$here/steps.sh"  # step, model_step

step "Create the workspace at $ws"
cftools init "$ws"

step "Ingest the C-VQA sample (300 published rows, images not shipped), the VQAv2-format example and six drawn-shape items"
# Each ingest states its source's licence (see the SOURCE.md files): the C-VQA repository states none.
cftools ingest cvqa "$here/cvqa/C-VQA-Real_questions.csv" --licence unknown
cftools ingest vqav2 --questions "$here/vqav2/questions.json" --annotations "$here/vqav2/annotations.json" \
  --images "$here/vqav2/images" --licence CC0-1.0
cftools ingest cvqa "$here/cvqa/drawn-shapes.csv" --images "$here/vqav2/images" --licence CC0-1.0   # six items with images

step "Generate $per_group counterfactual items per group with the embedded model (poor answers: it is offline)"
for group in numerical-direct numerical-indirect boolean; do
  model_step cftools generate rewrite --group "$group" --limit "$per_group" --max-attempts 1
done

step "Automatic checks"
cftools check

step "Verification in Label Studio"
cftools annotate push --kind cvqa --if-configured

step "MuCR: caption pairs -> contextual descriptions (embedded model) -> candidate images (embedded tiny pipeline)"
cftools ingest captions "$here/mucr/captions.csv" --licence CC0-1.0
model_step cftools generate context --limit "${MUCR_LIMIT:-2}" --max-attempts 2
cftools generate images --limit "${MUCR_LIMIT:-2}" --per-prompt 2
cftools check
echo "Candidate images (64x64 noise from the embedded tiny pipeline) are in $ws/images/generated"
bash "$here/mucr/quickstart-mucr.sh"    # cues, the MuCR release and its blind baseline (examples/mucr/)

step "Export an unverified release and verify it"
# The sources are under CC0-1.0 and an unknown licence, so the workspace's CC-BY-4.0 cannot be stamped over
# them (export refuses); the release is stamped "unknown" explicitly and its card lists each source's licence.
cftools export example --version 0.1.0 --include-unverified --force --licence unknown
cftools verify "$ws/releases/example-0.1.0"

step "Blind (text-only) baseline on the release"
cftools eval "$ws/releases/example-0.1.0" --model blind --limit "${EVAL_LIMIT:-4}"

step "What the release can show, and a reviewer's checks (preflight; exits non-zero when a check fails)"
cftools preflight "$ws/releases/example-0.1.0"

step "What the store holds"
cftools status

step "CFMM question pairs, in their own workspace ${ws}-cfmm (examples/cfmm/quickstart.sh)"
WORKSPACE="${ws}-cfmm" bash "$here/cfmm/quickstart.sh"

step "Edited images of the C-VQA drawn-shape items, in their own workspace ${ws}-edits (examples/edits/quickstart.sh)"
WORKSPACE="${ws}-edits" bash "$here/edits/quickstart.sh"
