#!/usr/bin/env bash
# The CFMM part of the demo, offline, on embedded defaults: draft pairs from the drawn images' source questions,
# check them, export --format cfmm (and native) --include-unverified, and evaluate the blind (text-only) baseline in
# rank mode: the per-type table with the paper's summed totals (of 600), the plain overall accuracy, random rows.
# WORKSPACE defaults to ./demo-workspace (an existing workspace is reused); N pairs are drafted.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
ws="${WORKSPACE:-$PWD/demo-workspace}"
export CFTOOLS_WORKSPACE="$ws"

source "$here/../steps.sh"  # step, model_step

step "Workspace at $ws"
[ -f "$ws/cftools.toml" ] || cftools init "$ws"

step "Ingest the drawn images with their source questions, and six hand-written pairs"
cftools ingest table "$here/sources.csv" --images "$here/images" --licence CC0-1.0
cftools ingest cfmm "$here/pairs.jsonl" --images "$here/images" --licence CC0-1.0

step "Draft ${N:-6} pairs with the embedded model (it sees no image: drafts are marked needs_image_check)"
model_step cftools generate pairs --types count,color,size,shape,direction,common --limit "${N:-6}" --max-attempts 2

step "Items per type and status beside the quota"
cftools status --kind cfmm

step "Automatic checks (leakage, options_invalid, no_condition, subject_drift, blind_answerable, ...)"
cftools check --no-embeddings

step "Author task in Label Studio (when a server is configured)"
if cftools annotate push --kind cfmm --task author --if-configured; then :; fi

step "Export the pairs (--format cfmm and native), unverified"
cftools export cfmm-example --version 0.1.0 --format cfmm --include-unverified --force --licence CC0-1.0
cftools export cfmm-example --version 0.1.0 --include-unverified --force --licence CC0-1.0

step "Blind (text-only) baseline in rank mode: per type, summed as the paper does (of 600), random rows"
cftools eval "$ws/releases/cfmm-example-0.1.0" --model blind --mode rank --swap-options
