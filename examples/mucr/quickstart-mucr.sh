#!/usr/bin/env bash
# MuCR steps for the demo, after the quickstart's `generate images` (issue 8's candidates): the best-ranked candidate
# pair of each style stands in for the select task (no annotators in the demo), the embedded model drafts cues and
# explanations, the checks look at them, and the unverified pairs are released in the MuCR format, verified and
# scored by the blind baseline (C2E / E2C / Cue; Exp needs three human explanations and a --judge).
# With a Label Studio server, people do the choosing and explaining instead:
#   cftools annotate push --kind mucr --task select; cftools annotate pull
#   cftools generate images --regenerate-rejected     # pairs marked "none usable" get new candidates
#   cftools generate cues; cftools check; cftools annotate push --kind mucr --task explain; cftools annotate pull
# Run it in a workspace where the quickstart ran (CFTOOLS_WORKSPACE), or alone: it then makes what it needs.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
ws="${CFTOOLS_WORKSPACE:-${WORKSPACE:-$PWD/demo-workspace}}"
export CFTOOLS_WORKSPACE="$ws"

source "$here/../steps.sh"  # step, model_step

if [ ! -f "$ws/cftools.toml" ]; then
  step "Create the workspace at $ws and make candidate images of ${MUCR_LIMIT:-2} caption pairs"
  cftools init "$ws"
  cftools ingest captions "$here/captions.csv" --licence CC0-1.0
  model_step cftools generate context --limit "${MUCR_LIMIT:-2}" --max-attempts 2
  cftools generate images --limit "${MUCR_LIMIT:-2}" --per-prompt 2
fi

step "MuCR: cue, false cues and a three-part explanation draft per selected pair (embedded model)"
model_step cftools generate cues --from-ranking --max-attempts 2
cftools check

step "MuCR release (v1 fields, composites beside split images, seeded choice sets); the demo's groups are small"
cftools export mucr-example --version 0.1.0 --format mucr --include-unverified --allow-small-groups --force --licence CC0-1.0
cftools verify "$ws/releases/mucr-example-0.1.0-mucr"

step "Blind (text-only) baseline on the MuCR release: C2E / E2C / Cue"
cftools eval "$ws/releases/mucr-example-0.1.0-mucr" --model blind
