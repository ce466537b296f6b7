#!/usr/bin/env bash
# Every GPU measurement of issue 49 in one command, each part under its own time limit (a slow or failing part is
# recorded and the rest still run); the figures go to ONE file, $OUT/gpu_results.json (+ gpu_results.md; the raw
# lines in gpu_results.jsonl, each part's exit status in parts.jsonl). Exits 0 even when a part fails. The parts'
# limits add up to 440 s; on an H100 the whole suite is planned to take about 6 minutes.
#
#   OUT=/some/dir bash bench/gpu_suite.sh           # on the GPU machine: python3, wheels from .whl/
#   OUT=/tmp/out PYTHON=.venv/bin/python SKIP_WHEELS=1 bash bench/gpu_suite.sh   # a dry run here (CUDA parts skip)
#   ONLY=generate bash bench/gpu_suite.sh         # the generate runner alone, with and without prefetching (~4 min)
#   ONLY=profile bash bench/gpu_suite.sh          # where generate's time goes at batch 32; the runner's switches (~4 min)
#   ONLY=compile bash bench/gpu_suite.sh          # generate eager vs compiled (eval --compile) at 32 (~3 min)
#   ONLY=prefill bash bench/gpu_suite.sh          # the prompt pass eager vs torch.compile'd, at 32 (~3 min)
#
# cftools is not installed: it runs from this checkout (PYTHONPATH), its missing dependencies are installed from
# the wheels in .whl/ (no network) into $SITE, and a dist-info beside them declares cftools' kinds (the entry
# points pyproject.toml declares), which a checkout alone does not.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_out}
PY=${PYTHON:-python3}
SITE=${SITE:-/tmp/site}
mkdir -p "$OUT" "$SITE"
RESULTS="$OUT/gpu_results.jsonl"
PARTS="$OUT/parts.jsonl"
: >"$RESULTS"
: >"$PARTS"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
SUITE_START=$(date +%s)

log() { echo "[gpu_suite +$(( $(date +%s) - SUITE_START ))s] $*"; }

# part NAME SECONDS COMMAND...: run COMMAND under a hard limit, record its exit status and time
part() {
    local name=$1 limit=$2 started rc
    shift 2
    # ONLY=edits,images: rerun those parts alone (the set-up parts always run)
    if [ -n "${ONLY:-}" ] && [[ ",$ONLY,install,declare,imports," != *",$name,"* ]]; then
        log "skip $name (ONLY=$ONLY)"
        return 0
    fi
    log "start $name (limit ${limit}s)"
    started=$(date +%s)
    timeout -k 10 "$limit" "$@" 2>&1 | tee -a "$OUT/suite.log"
    rc=${PIPESTATUS[0]}
    echo "{\"part\": \"$name\", \"rc\": $rc, \"seconds\": $(( $(date +%s) - started )), \"limit\": $limit}" >>"$PARTS"
    log "end $name: exit $rc"
}

install_wheels() {
    if [ "${SKIP_WHEELS:-0}" = 1 ] || ! ls .whl/*.whl >/dev/null 2>&1; then
        echo "no wheels installed (SKIP_WHEELS=1 or no .whl/)"
        return 0
    fi
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl
}

# cftools' entry points (its kinds) as a dist-info in $SITE, read from pyproject.toml
declare_cftools() {
    "$PY" - "$SITE" <<'PYEOF'
import sys, tomllib
from pathlib import Path
project = tomllib.loads(Path("pyproject.toml").read_text())["project"]
info = Path(sys.argv[1]) / f"cftools-{project['version']}.dist-info"
info.mkdir(parents=True, exist_ok=True)
(info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: cftools\nVersion: {project['version']}\n")
groups = [f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in points.items())
          for group, points in project.get("entry-points", {}).items()]
(info / "entry_points.txt").write_text("\n".join(groups))
print(f"declared {info}")
PYEOF
}

check_imports() {
    "$PY" - <<'PYEOF'
import torch, transformers
from cftools.kinds.registry import all_kinds
import cftools.evaluate.run, cftools.evaluate.vlm
print("cftools imports; kinds:", sorted(all_kinds()), "| torch", torch.__version__, "cuda", torch.cuda.is_available(),
      "| transformers", transformers.__version__)
try:
    import diffusers
    import cftools.imagegen.diffusers_backend, cftools.imagegen.edits
    print("diffusers", diffusers.__version__)
except ImportError as exc:
    print("no image parts:", exc)
PYEOF
}

export PY SITE
export -f install_wheels declare_cftools check_imports  # timeout runs them in a bash of their own
log "out: $OUT, python: $PY"
"$PY" -c "import torch; print('GPU:', torch.cuda.get_device_name() if torch.cuda.is_available() else 'none')" || true
nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.sm,clocks.max.sm --format=csv 2>/dev/null || true
part install 40 bash -c install_wheels
part declare 10 bash -c declare_cftools
export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
part imports 30 bash -c check_imports
part agreement 35 "$PY" bench/bench_gpu.py --part agreement --out "$RESULTS"
part llava 185 "$PY" bench/bench_gpu.py --part llava --budget 165 --questions 128 --questions-b1 16 --out "$RESULTS"
# the generate runner with and without prefetching, side by side; only when asked for (ONLY=generate, ~3 min)
if [[ ",${ONLY:-}," == *",generate,"* ]]; then
    # GENERATE_ARGS: other options of bench_gpu.py, e.g. "--batches 32 --compare-prefetch 32 --control"
    # shellcheck disable=SC2086
    part generate 300 "$PY" bench/bench_gpu.py --part llava --modes generate --batches 32,64,auto \
        --compare-prefetch 32,64,auto --budget 240 --questions 256 --out "$RESULTS" ${GENERATE_ARGS:-}
fi
# where generate's GPU time goes at batch 32, and the runner's switches side by side; only when asked (ONLY=profile)
if [[ ",${ONLY:-}," == *",profile,"* ]]; then
    # PROFILE_ARGS: other options of gpu_profile.py, e.g. "--variants loop --batches 8"
    # shellcheck disable=SC2086
    part profile 270 "$PY" bench/gpu_profile.py --out "$RESULTS" --table-dir "$OUT" --budget 240 --repeats 3 \
        ${PROFILE_ARGS:-}
fi
# the prefill's elementwise work: the language model's prompt pass eager vs compiled; only when asked (ONLY=prefill)
if [[ ",${ONLY:-}," == *",prefill,"* ]]; then
    part prefill 200 "$PY" bench/gpu_profile.py --out "$RESULTS" --parts prefill --budget 180 --repeats 3
fi
# eager vs compiled decoding (eval --compile) at batch 32 through cftools eval, 256 questions each, after a compiled
# warm-up on the same questions (every prompt bucket); only when asked (ONLY=compile, ~3 min)
if [[ ",${ONLY:-}," == *",compile,"* ]]; then
    part compile 185 "$PY" bench/bench_gpu.py --part llava --modes generate --batches 32 --compare-compile 32 \
        --budget 165 --questions 256 --out "$RESULTS"
fi
part images 65 "$PY" bench/bench_images.py --device cuda --batches 1,4,8,16 --calls 2 --out "$RESULTS"
part edits 75 "$PY" bench/bench_edits.py --device cuda --batches 1,4,8,16 --calls 2 --out "$RESULTS"
"$PY" bench/gpu_report.py "$OUT" || log "the report failed; the raw figures are in $RESULTS"
log "done in $(( $(date +%s) - SUITE_START ))s: $OUT/gpu_results.json"
exit 0
