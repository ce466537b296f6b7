"""Evaluate a model on a release: ask every question, log every prediction, score the run.

`run_eval(release_dir, model_spec, ...)` asks both questions of every item (original and counterfactual),
each as its own conversation, and writes a run folder:

    config.json        the exact configuration (model, mode, score, prompt template and its hash, ...)
    predictions.jsonl  one line per question asked: id, which, raw answer, parsed answer, option scores, correct
    report.md / report.csv / report.png   the scores (see `cftools.evaluate.report`)

Predictions are the cache: a rerun, or a run killed halfway and started again, asks only what is missing
(lines are appended and fsync'ed per batch; a truncated last line is dropped on restart). A run folder
holds one configuration; pointing a different model, mode, score or template at it is an error.

A run can be split between processes (`shard=`, see `cftools.evaluate.shards`): each shard asks its share
and writes its own predictions file in the run folder; `cftools.evaluate.merge` merges them into
predictions.jsonl and writes the reports, so a merged run equals a single-process one.

A release is verified before it is read (`cftools verify`: every file against its manifest) and refused when it
fails; `verify=False` (`--no-verify`) reads it as it is and says so in the report.

A run's identity is the SHA-256 of the release's manifest.json, the SHA-256 of its content (every file but the
manifest, as it is on disk: an in-place edit that leaves the manifest alone still changes it), the
model spec, the mode and score, the prompt template's hash and the generation settings (`IDENTITY_KEYS`).
The default run folder's name ends with a short hash of that identity, so a release exported again with
other content (`export --force`) starts a new run folder instead of reusing old predictions and old gold;
`run_eval` says why in `EvalResult.notes`. Every prediction is also written to the store's Prediction
table when there is a workspace.

Model specs (`parse_model_spec`):
- `hf:PATH_OR_ID` — a transformers image-text-to-text model (`cftools.vlm.HFVisionModel`); generate or rank.
- `openai:MODEL` — an OpenAI-compatible vision chat API, images as data URLs (the `cftools.llm` backend:
  retries, concurrency, and the request cache when there is a workspace); generate only.
- `blind` / `blind:BACKEND:MODEL` — a text-only LLM answering without the image (plain `blind`: the
  embedded local model); generate only. The items it gets right are listed in the report.

Models that need an image skip items without one; skipped items are counted in the report.

Modes:
- generate: the reply is read for the question's answer type (`cftools.answers`); an unreadable reply
  is wrong and counted as unknown. With options (CFMM), the reply is read as free text and compared with
  the gold option after normalisation.
- rank: every option is scored as the assistant's reply (`--score mean-loss`: lowest mean token loss
  wins; `sum-logprob`: highest summed log-probability wins). Items without options get a derived option
  set only where it is well defined: yes/no questions rank ["yes", "no"]; count questions rank the
  numbers "0".."20" (a gold count outside that range cannot be chosen and counts as wrong); other
  questions without options are skipped in rank mode and counted.

Each kind builds its own questions and metrics (`cftools.kinds`); see its module for what it asks.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence


from cftools import __version__
from cftools.errors import CftoolsError, Hint, InputError, ModelCallsFailed, naming_the_file
from cftools.evaluate.answerers import (RANK_HINT, ChatAnswerer, ModelSpec, judge_answer, load_answerer,
                                        parse_model_spec)
from cftools.evaluate.metrics import summarize
from cftools.evaluate.predictions import (READINGS, STRICT, EvalResult, append_predictions, strict_lines,
                                          outcomes_from_predictions, prediction_line, read_predictions, read_reply,
                                          reading_differences, record_eval_run)
from cftools.evaluate.questions import SWAPPED, PromptTemplates, Question, Wording, build_questions
from cftools.evaluate.shards import (Shard, gather_predictions, shard_prediction_files, start_shard,
                                     write_text_atomically)
from cftools.kinds import all_kinds
from cftools.evaluate.prefetch import prefetching, submit_batch
from cftools.evaluate.vlm import SCORES, UnreadableImage, best_option, compile_by_default
from cftools.evaluate.lock import predictions_lock
from cftools.release.layout import (MANIFEST_NAME, files_content_sha256, hash_file, load_records,
                                    manifest_content_sha256)
from cftools.release.verify import refuse_unrecorded_manifest, verification_failure, verify_release

MODES = ("generate", "rank")
CONFIG_NAME = "config.json"
PREDICTIONS_NAME = "predictions.jsonl"
DEFAULT_RUNS_DIR = "runs"
# What makes two runs the same run: a run folder refuses a different value of any of these.
IDENTITY_KEYS = ("release_manifest_sha256", "release_content_sha256", "model", "mode", "score", "template_sha256", "max_new_tokens", "dtype",
                 "judge", "prompt", "swap_options", "judge_aggregate", "kind_options", "reading")
# How the differing identity keys are named when eval says why it starts a new run.
IDENTITY_LABELS = {"release_manifest_sha256": "the release changed (manifest SHA-256)",
                   "release_content_sha256": "the release's files changed (content SHA-256)", "model": "model",
                   "mode": "mode", "score": "score", "template_sha256": "the prompt template changed (SHA-256)",
                   "max_new_tokens": "max new tokens", "dtype": "dtype", "judge": "judge",
                   "prompt": "prompt variant", "swap_options": "swapped options",
                   "judge_aggregate": "judge aggregate", "kind_options": "kind options", "reading": "reading"}
PLAIN = "plain"
AUTO = "auto"
AUTO_START_BATCH = 64  # --batch-size auto starts here and halves on every out-of-memory error
DEFAULT_BATCH = 8  # the batch size when none is given, except for hf: models on CUDA (auto there)
JUDGE_AGGREGATES = ("best-match", "mean")  # a judged answer's score over several references


# -- the run ------------------------------------------------------------------------------------------------

def is_out_of_memory(exc: BaseException) -> bool:
    """A device out-of-memory error (torch's CUDA/MPS ones, or a RuntimeError that says so)."""
    return type(exc).__name__ == "OutOfMemoryError" or (isinstance(exc, (RuntimeError, MemoryError))
                                                         and "out of memory" in str(exc).lower())


def resolved_batch_size(batch_size: Optional[int | str], device: str) -> int:
    """The batch size a run starts at: auto (AUTO_START_BATCH, halved on out of memory) when asked for, and by
    default for a model on CUDA (the GPU's memory, not a fixed 8, is what bounds its batch); else 8."""
    if batch_size is None:
        batch_size = AUTO if device == "cuda" else DEFAULT_BATCH
    return AUTO_START_BATCH if batch_size in (AUTO, 0) else int(batch_size)


def release_memory() -> None:
    import gc

    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:
        pass


def identity_of(config: dict[str, Any]) -> dict[str, Any]:
    """The identity keys of a run's configuration: what makes two runs the same run."""
    return {key: config.get(key) for key in IDENTITY_KEYS}


def run_identity(config: dict[str, Any]) -> str:
    """SHA-256 of the identity keys of a run's configuration."""
    return hashlib.sha256(json.dumps(identity_of(config), sort_keys=True).encode("utf-8")).hexdigest()


def default_run_name(release_dir: Path, spec: str, mode: str, score: str, identity: str = "",
                     variant: str = PLAIN, swap_options: bool = False) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", spec.replace("hf:", "").strip("/")).strip("-")[-60:]
    name = (f"{Path(release_dir).resolve().name}--{slug}--{mode}" + (f"-{score}" if mode == "rank" else "")
            + (f"--{variant}" if variant != PLAIN else "") + ("--swapped" if swap_options else ""))
    return f"{name}--{identity[:10]}" if identity else name


def default_out_dir(release_dir: Path, spec: str, mode: str, score: str, workspace: Any = None,
                    identity: str = "", variant: str = PLAIN, swap_options: bool = False) -> Path:
    name = default_run_name(release_dir, spec, mode, score, identity, variant, swap_options)
    return workspace.path(DEFAULT_RUNS_DIR, name) if workspace is not None else Path(DEFAULT_RUNS_DIR) / name


def _read_config(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise InputError(path, "not valid JSON") from None


def read_run_config(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / CONFIG_NAME
    if not path.is_file():
        raise CftoolsError(f"{run_dir} is not an eval run folder (no {CONFIG_NAME})")
    return _read_config(path)


def write_config(out_dir: Path, config: dict[str, Any]) -> None:
    """config.json, replaced whole: the shards of a run may all write it at once (with the same identity)."""
    with naming_the_file(out_dir / CONFIG_NAME):  # a full disk names the file, not its temporary one
        write_text_atomically(out_dir / CONFIG_NAME, json.dumps(config, indent=2, sort_keys=True) + "\n")


def differences(previous: dict[str, Any], config: dict[str, Any]) -> list[str]:
    """What differs between two runs' identities, in words ("the release changed (manifest SHA-256) abc… -> def…")."""
    out = []
    for key in IDENTITY_KEYS:
        old, new = previous.get(key), config.get(key)
        if old != new:
            shorten = (lambda v: f"{v[:12]}…" if isinstance(v, str) and key.endswith("sha256") else repr(v))
            out.append(f"{IDENTITY_LABELS[key]}: {shorten(old)} -> {shorten(new)}")
    return out


def check_config(out_dir: Path, config: dict[str, Any]) -> None:
    path = out_dir / CONFIG_NAME
    if not path.exists():
        return
    differing = differences(_read_config(path), config)
    if differing:
        raise CftoolsError(f"{out_dir} holds a run with another configuration ({'; '.join(differing)})",
                           hint=Hint("{message}; choose another {out}", out="--out"))


def why_new_run(out_dir: Path, config: dict[str, Any]) -> list[str]:
    """Notes on earlier default run folders of the same release name, model and mode whose identity differs:
    why this run does not reuse their predictions."""
    if (out_dir / CONFIG_NAME).exists():
        return []
    prefix = out_dir.name.rsplit("--", 1)[0] + "--"
    notes = []
    earlier = [*out_dir.parent.glob(prefix + "*"), out_dir.parent / prefix[:-2]]  # and the name before identities
    for other in sorted(earlier):
        if other == out_dir or not (other / CONFIG_NAME).is_file():
            continue
        differing = differences(_read_config(other / CONFIG_NAME), config)
        if differing:
            notes.append(f"not reusing {other.name}: {'; '.join(differing)}; this run goes to {out_dir.name}")
    return notes


def release_content(release_dir: Path, verify: bool, workspace: Any = None) -> str:
    """The release's content SHA-256, after checking every file against the manifest and, in a workspace, the
    manifest against the one its store recorded at export (unless not VERIFY); a release that fails is refused with
    `cftools verify`'s (or `doctor`'s) message."""
    if not verify:
        return files_content_sha256(release_dir)
    report = verify_release(release_dir)
    if not report.ok:
        raise CftoolsError(f"{verification_failure(report)}; `cftools verify {release_dir}` lists them all",
                           hint=Hint("{message}, {no_verify} scores the release as it is", no_verify="--no-verify"))
    refuse_unrecorded_manifest(workspace.store if workspace is not None else None, release_dir,
                               unverified="scores the release as it is")
    return manifest_content_sha256(release_dir)  # the files are as the manifest says: no second hashing


def first_askable(records: list[dict[str, Any]], limit: int, questions_of: Callable[[list], list]) -> list[dict]:
    """The first LIMIT records that have a question to ask this model: a release that mixes kinds may start with
    records that ask none (MuCR drafts without a cue), and `--limit 4` must still ask something."""
    chosen: list[dict[str, Any]] = []
    for record in records:
        if len(chosen) >= max(0, limit):
            break
        if questions_of([record]):
            chosen.append(record)
    return chosen


def rank_correct(question: Question, winner: Optional[str]) -> bool:
    """A ranked answer is right when the winning option is the one that reads as the gold answer (also how
    `cftools release diff` rescores a stored ranking against a relabelled item)."""
    return question.gold_option is not None and winner == question.gold_option


def rank_line(question: Question, scores: list[dict[str, float]], score: str) -> dict[str, Any]:
    """The prediction line of a ranked question: the winning option, or none (unknown, wrong) on a tie or when no
    option has a finite score."""
    index = best_option(scores, score)
    winner = question.options[index] if index is not None else None
    correct = rank_correct(question, winner)
    return prediction_line(question, None, winner, correct,
                           scores=[{"option": o, **s} for o, s in zip(question.options, scores)],
                           extra={"position": index})


def can_rank(spec: ModelSpec) -> bool:
    """hf: models, and blind on the embedded model (its logits are at hand); API models cannot rank."""
    return spec.kind == "hf" or (spec.kind == "blind" and spec.target.partition(":")[0] in ("", "local"))


def check_prompt_variant(variant: str) -> None:
    known = {PLAIN} | {v for kind in all_kinds().values() for v in kind.hooks.evaluate.prompt_variants}
    if variant not in known:
        raise CftoolsError(f"unknown prompt variant {variant!r}; choose one of {', '.join(sorted(known))}",
                           hint=Hint(f"unknown {{prompt}} {variant!r}; choose one of {', '.join(sorted(known))}",
                                     prompt="--prompt"))


def position_bias(predictions: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """How often the choice follows the position, not the content: over questions asked in both option orders,
    the share where the same position was chosen both times (so a different option). 0 for a model that reads
    the options; 1 for one that always picks by position. Also: how often the first position was chosen, and
    how often the same option was chosen in both orders."""
    by_key = {(p["id"], p["which"]): p for p in predictions}
    same_position = same_option = first = n = 0
    for (item_id, which), swapped in by_key.items():
        if not which.endswith(SWAPPED):
            continue
        plain = by_key.get((item_id, which[:-len(SWAPPED)]))
        if plain is None or plain.get("position") is None or swapped.get("position") is None:
            continue
        n += 1
        same_position += plain["position"] == swapped["position"]
        same_option += plain.get("parsed") == swapped.get("parsed")
        first += (plain["position"] == 0) + (swapped["position"] == 0)
    return {"pairs": n, "follows_position": same_position / n if n else None,
            "same_option": same_option / n if n else None, "first_position": first / (2 * n) if n else None}


def paper_mode(records: Sequence[dict], spec: ModelSpec) -> str:
    """The answering method of the papers of the release's kinds (CFMM ranks the options by loss; C-VQA and MuCR
    read generated answers); generate when they differ or the model cannot rank."""
    kinds = all_kinds()
    modes = {kinds[k].hooks.evaluate.paper_settings.get("mode") for k in {str(r.get("kind")) for r in records}
             if k in kinds}
    modes.discard(None)
    mode = modes.pop() if len(modes) == 1 else "generate"
    return mode if mode != "rank" or can_rank(spec) else "generate"


def mixed_modes(records: Sequence[dict]) -> dict[str, str]:
    """Kind -> its paper's mode, for the release's kinds when their papers answer differently (else empty)."""
    kinds = all_kinds()
    modes = {k: kinds[k].hooks.evaluate.paper_settings["mode"] for k in sorted({str(r.get("kind")) for r in records})
             if k in kinds and kinds[k].hooks.evaluate.paper_settings.get("mode")}
    return modes if len(set(modes.values())) > 1 else {}


@dataclass(frozen=True)
class EvalOptions:
    """How one run asks its questions: what `cftools eval run`'s options say, passed to `run_eval` as one value.

    KIND_OPTIONS: each kind's own options (named after it, e.g. `cfmm_...`); only those of the release's kinds enter
    the run's identity. SHARD, RAY, RAY_CONFIG, PREFETCH and COMPILE: see `run_eval`."""

    mode: Optional[str] = None
    score: str = "mean-loss"
    batch_size: Optional[int | str] = None
    device: str = "auto"
    dtype: str = "auto"
    limit: Optional[int] = None
    out_dir: Optional[Path] = None
    template: Optional[str] = None
    max_new_tokens: int = 16
    judge: Optional[str] = None
    judge_aggregate: str = "best-match"
    concurrency: int = 4
    allow_downloads: bool = False
    prompt_variant: str = PLAIN
    swap_options: bool = False
    kind_options: Optional[dict[str, Any]] = None
    shard: Optional[Shard] = None
    verify: bool = True
    reading: str = STRICT
    ray: Optional[str] = None
    ray_config: Optional[dict[str, Any]] = None
    prefetch: Optional[bool] = None
    compile: Optional[bool] = None


def check_options(options: EvalOptions) -> None:
    """Refuse an unknown mode, score, reading or judge aggregate, or a batch size below 1, before anything runs."""
    if options.mode is not None and options.mode not in MODES:
        raise CftoolsError(f"unknown mode {options.mode!r}; choose one of {', '.join(MODES)}")
    if options.score not in SCORES:
        raise CftoolsError(f"unknown score {options.score!r}; choose one of {', '.join(SCORES)}")
    if options.batch_size is not None and options.batch_size not in (AUTO, 0) and int(options.batch_size) < 1:
        raise CftoolsError("the batch size must be at least 1 (or auto)",
                           hint=Hint("{batch_size} must be at least 1 (or auto)", batch_size="--batch-size"))
    if options.reading not in READINGS:
        raise CftoolsError(f"unknown reading {options.reading!r}; choose one of {', '.join(READINGS)}")
    if options.judge_aggregate not in JUDGE_AGGREGATES:
        raise CftoolsError(f"unknown judge aggregate {options.judge_aggregate!r}; choose one of "
                           f"{', '.join(JUDGE_AGGREGATES)}")


def compiled_decoding_wanted(asked: Optional[bool], spec: ModelSpec, on_ray: bool,
                             notify: Optional[Callable[[str], None]] = None) -> bool:
    """Whether this run decodes compiled: as ASKED (None: CFTOOLS_COMPILE's setting), for an `hf:` model asked here."""
    wanted = compile_by_default() if asked is None else asked
    if wanted and on_ray and notify:
        notify("--compile: the Ray workers decode as transformers does (compiled decoding is asked here only)")
    return bool(wanted) and spec.kind == "hf" and not on_ray


def wording_of(options: EvalOptions, kind_options: dict[str, Any]) -> Wording:
    """How this run's questions are worded (with the kinds' options that apply)."""
    return Wording(max_new_tokens=options.max_new_tokens, prompt_variant=options.prompt_variant,
                   swap_options=options.swap_options, options=kind_options)


def run_eval(release_dir: Path | str, model: str, *, options: EvalOptions = EvalOptions(), workspace: Any = None,
             answerer: Any = None, progress: Optional[Callable[[int, int], None]] = None,
             notify: Optional[Callable[[str], None]] = None,
             waiting: Callable[[str], contextlib.AbstractContextManager] = lambda what: contextlib.nullcontext(),
             ) -> EvalResult:
    """Run (or resume) an evaluation as OPTIONS say; returns the run's configuration, summary and predictions.

    ANSWERER, when given, answers instead of the model MODEL names (tests, replays). PROGRESS hears (questions
    answered, questions in all); NOTIFY hears notes for the user; WAITING(what) wraps the steps of unknown length
    (the release's verification, the model's load), for a spinner.

    The release is verified first and refused when it fails, unless not `options.verify` (then the report says so).
    `options.reading`: how generated replies are read, cftools' strict reading or the papers' own scripts' (`paper`).

    With `options.shard`, ask only that shard's share into its own predictions file and write no report: the result
    holds the share's predictions and an empty summary (`cftools.evaluate.merge` makes the run's).

    With `options.ray` (a cluster address, or `local`), an `hf:` model answers on Ray workers, several batches at
    once (`cftools.evaluate.remote`); this process still writes every prediction, as it comes back. API and blind
    answerers run here as always (their calls go through the store's request cache).

    `options.prefetch`: prepare the next batch's inputs on a background thread while this one runs (`cftools.
    evaluate.prefetch`; default: on for a model on a GPU, unless CFTOOLS_PREFETCH says otherwise); the predictions
    are the same either way.

    `options.compile`: decode an `hf:` model's generated replies compiled (`HFVisionModel.use_compiled_decoding`;
    default: CFTOOLS_COMPILE's setting); not on Ray workers. config.json's `compile` says when it was on."""
    release_dir = Path(release_dir)
    check_options(options)
    mode, device, dtype, batch_size = options.mode, options.device, options.dtype, options.batch_size
    kind_options = {k: v for k, v in sorted((options.kind_options or {}).items()) if v is not None}
    spec = parse_model_spec(model)
    with waiting("verifying the release"):
        content = release_content(release_dir, options.verify, workspace)
    records = load_records(release_dir)
    if mode is None:  # the paper's method for the release's kind
        mode = paper_mode(records, spec)
        mixed = mixed_modes(records)
        if mixed and notify is not None:
            notify(f"mode {mode} for every question: this release mixes kinds whose papers answer differently ("
                   + ", ".join(f"{kind} {how}" for kind, how in mixed.items()) + ") and one run has one mode; "
                   "--mode chooses it, and a release of one kind is scored as its paper does")
    if mode == "rank" and not can_rank(spec):
        raise CftoolsError("rank mode needs token log-probabilities: use an hf: model or blind (the embedded "
                           "model)", hint=RANK_HINT)
    check_prompt_variant(options.prompt_variant)
    templates = PromptTemplates(options.template, workspace.root if workspace is not None else None)
    if options.limit is not None:
        wording = wording_of(options, kind_options)
        records = first_askable(records, options.limit, lambda chosen: build_questions(
            release_dir, chosen, templates, mode, spec.needs_image, wording=wording)[0])
    present = {str(r.get("kind")) for r in records}
    # a kind's options are named after it: only those of the kinds in this release enter the run's identity
    kind_options = {k: v for k, v in kind_options.items() if k.split("_", 1)[0] in present}
    questions, skipped = build_questions(release_dir, records, templates, mode, spec.needs_image,
                                         wording=wording_of(options, kind_options))
    on_ray = options.ray is not None and spec.kind == "hf" and answerer is None
    if options.ray is not None and not on_ray and notify:
        notify(f"--ray: {spec} is asked from this process (only hf: models run on Ray workers)")
    if spec.kind == "hf":
        from cftools.evaluate.vlm import resolve_device, resolve_dtype

        if on_ray:
            from cftools.evaluate.remote import cluster_device

            device = cluster_device(device, options.ray)
        device = resolve_device(device) if not on_ray else device
        dtype = resolve_dtype(dtype, device)
    else:
        device, dtype = "api", "n/a"
    batch_size = resolved_batch_size(batch_size, device)
    compiled = compiled_decoding_wanted(options.compile, spec, on_ray, notify)
    config = {
        "release": str(release_dir.resolve()), "release_name": release_dir.resolve().name,
        "release_manifest_sha256": hash_file(release_dir / MANIFEST_NAME), "release_content_sha256": content,
        "verified": options.verify,
        "model": str(spec), "mode": mode, "score": options.score if mode == "rank" else None,
        "score_rule": ("lowest mean token loss of the option wins" if options.score == "mean-loss"
                       else "highest summed log-probability of the option wins") if mode == "rank" else None,
        "template": templates.name, "template_sha256": templates.sha256, "max_new_tokens": options.max_new_tokens,
        "device": device, "dtype": dtype, "batch_size": batch_size, "limit": options.limit, "judge": options.judge,
        "judge_aggregate": options.judge_aggregate if options.judge else None, "kind_options": kind_options or None,
        "items": len(records), "questions": len(questions), "skipped": skipped.as_dict(),
        # None when not asked for, so run folders made before these options still match
        "prompt": options.prompt_variant if options.prompt_variant != PLAIN else None,
        "swap_options": True if options.swap_options else None,
        "reading": options.reading if options.reading != STRICT else None,
        "compile": True if compiled else None,
        "cftools_version": __version__,
    }
    notes: list[str] = []
    if options.out_dir:
        out_dir = Path(options.out_dir)
    else:
        out_dir = default_out_dir(release_dir, str(spec), mode, options.score, workspace, run_identity(config),
                                  options.prompt_variant, options.swap_options)
        notes = why_new_run(out_dir, config)
    for note in notes:
        if notify:
            notify(note)
    created = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    predictions_path = out_dir / (PREDICTIONS_NAME if options.shard is None else options.shard.predictions_name)
    # one run at a time asks into a predictions file; a run refused before it stored anything leaves no folder
    with removed_unless_stored(out_dir, predictions_path, created), predictions_lock(predictions_path):
        check_config(out_dir, config)
        write_config(out_dir, config)
        if options.shard is not None:
            share = set(start_shard(out_dir, options.shard, identity_of(config), [q.key for q in questions]))
            questions = [q for q in questions if q.key in share]
        done = cached_predictions(out_dir, predictions_path)
        todo = [q for q in questions if q.key not in done]
        store = workspace.store if workspace is not None else None
        llm_config = workspace.section("llm") if workspace is not None else None
        judge_answerer = None
        if todo and on_ray:
            from cftools.evaluate.remote import remote_answerer

            answerer = remote_answerer(str(spec), device, dtype, options.ray, options.allow_downloads,
                                       options.ray_config)
        if todo:
            with waiting(f"loading {model}"):
                answerer = answerer or load_answerer(spec, device, dtype, llm_config, store, options.concurrency,
                                                     allow_downloads=options.allow_downloads)
            if hasattr(answerer, "use_compiled_decoding"):
                answerer.use_compiled_decoding(compiled)
            if options.judge and any(q.judged for q in todo):
                with waiting(f"loading the judge {options.judge}"):
                    judge_answerer = load_answerer(parse_model_spec(f"blind:{options.judge}"), device, dtype,
                                                   llm_config, store, options.concurrency)
        how = Marking(mode, options.score, templates, judge_answerer, options.judge_aggregate, options.reading)
        asked = 0
        if progress:
            progress(len(questions) - len(todo), len(questions))
        # Questions of like length share a batch: less padding for a batched model (predictions are keyed, not ordered).
        todo = sorted(todo, key=batch_order)
        start = 0
        try:
            if getattr(answerer, "in_flight", 1) > 1:  # a cluster's workers: batches side by side, each written
                # as it comes back
                asked = ask_side_by_side(answerer, todo, batch_size, predictions_path,
                                         lambda batch: ask_batch(answerer, batch, how),
                                         lambda n: progress and progress(len(questions) - len(todo) + n,
                                                                         len(questions)))
                start = len(todo)
            # the next batch's inputs are prepared on a background thread while this one runs (`prefetch`)
            with prefetching(answerer if start < len(todo) else None, options.prefetch) as asking:
                while start < len(todo):
                    batch = next_batch(todo, start, batch_size)
                    submit_batch(asking, batch_calls(batch, mode))
                    if start + len(batch) < len(todo):
                        submit_batch(asking, batch_calls(next_batch(todo, start + len(batch), batch_size), mode))
                    try:
                        with naming_the_question(batch):
                            lines = ask_batch(asking, batch, how)
                    except ModelCallsFailed as exc:
                        exc.nothing_stored = exc.nothing_stored and not asked  # earlier batches' lines are stored
                        raise
                    except Exception as exc:  # noqa: BLE001 (only out of memory is handled; the rest re-raised)
                        if not (is_out_of_memory(exc) and len(batch) > 1):
                            raise
                        # the predictions already written stay; this batch is asked again
                        batch_size = max(1, len(batch) // 2)
                        release_memory()
                        if notify:
                            notify(f"out of memory at batch size {len(batch)}: going on with {batch_size}")
                        continue
                    append_predictions(predictions_path, lines)
                    asked += len(batch)
                    start += len(batch)
                    if progress:
                        progress(len(questions) - len(todo) + asked, len(questions))
        finally:
            if on_ray and answerer is not None:  # its workers end with the run
                answerer.close()
        done = cached_predictions(out_dir, predictions_path)
        predictions = [done[key] for key in sorted(q.key for q in questions) if key in done]
        if options.shard is not None:
            return EvalResult(out_dir=out_dir, config=config, summary={}, predictions=predictions, asked=asked,
                              notes=notes)
        return finish_run(out_dir, config, predictions, asked=asked, notes=notes, workspace=workspace)


def ask_side_by_side(answerer: Any, todo: Sequence[Question], batch_size: int, predictions_path: Path,
                     ask: Callable[[list[Question]], list[dict[str, Any]]],
                     progress: Callable[[int], Any]) -> int:
    """TODO's batches asked ANSWERER.in_flight at a time (`cftools.distributed.as_completed`); each batch's lines
    are appended as soon as it comes back. Returns how many questions were asked."""
    from cftools.distributed import as_completed, in_flight_of

    batches, start = [], 0
    while start < len(todo):
        batches.append(next_batch(todo, start, batch_size))
        start += len(batches[-1])
    asked = 0
    for batch, lines in as_completed(batches, ask, in_flight_of(answerer)):
        append_predictions(predictions_path, lines)
        asked += len(batch)
        progress(asked)
    return asked


@contextlib.contextmanager
def removed_unless_stored(out_dir: Path, predictions_path: Path, created: bool) -> Iterator[None]:
    """On an error, remove OUT_DIR when this run CREATED it and it holds nothing but this run's config and lock
    (another shard's files, or any prediction, keep it): a refused or failed run leaves no run folder behind."""
    try:
        yield
    except BaseException:
        if created:
            from cftools.evaluate.lock import lock_path, owner_path

            ours = {out_dir / CONFIG_NAME, lock_path(predictions_path), owner_path(predictions_path), predictions_path}
            held = [p for p in out_dir.rglob("*") if not p.is_dir()]
            stored = predictions_path.is_file() and predictions_path.stat().st_size > 0
            if not stored and all(p in ours for p in held):
                shutil.rmtree(out_dir, ignore_errors=True)
        raise


def batch_order(question: Question) -> tuple:
    """Questions answered at one length together, then those of like prompt length (less padding)."""
    prompt = question.prompt
    return (prompt.max_new_tokens, len(prompt.images), len(prompt.text), len(prompt.options or ()))


def next_batch(todo: Sequence[Question], start: int, batch_size: int) -> list[Question]:
    """Up to BATCH_SIZE questions from START that share one `max_new_tokens` (one generation call each batch;
    the model also splits a mixed batch, so a reply never depends on its batch either way)."""
    limit = todo[start].prompt.max_new_tokens
    batch = []
    for question in todo[start:start + batch_size]:
        if question.prompt.max_new_tokens != limit:
            break
        batch.append(question)
    return batch


def cached_predictions(out_dir: Path, own: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """What is already answered for a run writing to OWN: OWN, predictions.jsonl, and the files of shards not
    merged yet (a question is never asked twice)."""
    others = [out_dir / PREDICTIONS_NAME, *shard_prediction_files(out_dir).values()]
    return gather_predictions(own, [path for path in others if path != own])


def summarize_run(config: dict[str, Any], predictions: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A run's summary from its configuration and predictions (in key order: the bootstrap intervals do not
    depend on the order the questions were asked in, or by which process)."""
    predictions = sorted(predictions, key=lambda p: (str(p["id"]), str(p["which"])))
    summary = summarize(outcomes_from_predictions(predictions))
    summary["skipped"] = config.get("skipped") or {}
    summary["answered"] = len(predictions)
    if config.get("swap_options"):
        summary["position_bias"] = position_bias(predictions)
    if config.get("reading") not in (None, STRICT):  # the paper's or a harness's reading: cftools' beside it
        summary["reading_differences"] = reading_differences(predictions)
        summary["strict_reading"] = summarize(outcomes_from_predictions(strict_lines(predictions)))
    if not config.get("imported_from") and parse_model_spec(config["model"]).kind == "blind":
        summary["blind_correct"] = sorted(
            [{"id": p["id"], "which": p["which"], "raw": p["raw"] if p["raw"] is not None else p.get("parsed"),
              "gold": p["gold"]}
             for p in predictions if p.get("correct")], key=lambda p: (p["id"], p["which"]))
    return summary


def finish_run(out_dir: Path, config: dict[str, Any], predictions: Sequence[dict[str, Any]], asked: int = 0,
               notes: Sequence[str] = (), workspace: Any = None) -> EvalResult:
    """The end of a run (of `run_eval`, and of a merge): score the predictions, write report.md, report.csv and
    report.png, and keep the run in the workspace store when there is one."""
    result = EvalResult(out_dir=Path(out_dir), config=config, summary=summarize_run(config, predictions),
                        predictions=list(predictions), asked=asked, notes=list(notes))
    from cftools.evaluate.report import write_reports

    write_reports(result)
    if workspace is not None:
        record_eval_run(workspace.store, result)
    return result


def split_by_call(batch: Sequence[Question], mode: str) -> tuple[list[Question], list[Question]]:
    """A batch's questions whose options are ranked (rank mode, options given) and those answered in words."""
    rank = [q for q in batch if mode == "rank" and q.options is not None]
    return rank, [q for q in batch if q not in rank]


def batch_calls(batch: Sequence[Question], mode: str) -> list[tuple[str, list[Any]]]:
    """The model calls `ask_batch` makes for BATCH: (rank or generate, the prompts) each, in its order."""
    rank, generate = split_by_call(batch, mode)
    return [(call, [q.prompt for q in questions]) for call, questions in (("rank", rank), ("generate", generate))
            if questions]


@contextlib.contextmanager
def naming_the_question(batch: Sequence[Question]) -> Iterator[None]:
    """An image of BATCH that cannot be read, reported with the record (item id and question) that shows it."""
    try:
        yield
    except UnreadableImage as exc:
        question = next((q for q in batch if exc.path in q.prompt.images), None)
        if question is None:
            raise
        raise CftoolsError(f"record {question.item_id} ({question.which} question): {exc}") from None


@dataclass(frozen=True)
class Marking:
    """How a run marks the model's replies as prediction lines: its mode and score, the judge of judged questions
    (and its templates and aggregate), and how generated replies are read."""

    mode: str
    score: str
    templates: PromptTemplates
    judge: Optional[ChatAnswerer] = None
    judge_aggregate: str = "best-match"
    reading: str = STRICT


def ask_batch(answerer: Any, batch: list[Question], how: Marking) -> list[dict[str, Any]]:
    """Ask one batch of questions; one prediction line per question."""
    rank, generate = split_by_call(batch, how.mode)
    lines: dict[tuple[str, str], dict[str, Any]] = {}
    if rank:
        for question, scores in zip(rank, answerer.score_options([q.prompt for q in rank])):
            lines[question.key] = rank_line(question, scores, how.score)
    if generate:
        for question, raw in zip(generate, answerer.generate([q.prompt for q in generate])):
            if question.judged:
                verdict = (judge_answer(how.judge, how.templates, question, raw, how.judge_aggregate)
                           if how.judge is not None else {"similarities": None})
                lines[question.key] = prediction_line(question, raw, None, None, extra=verdict)
            else:
                lines[question.key] = generated_line(question, raw, how.reading)
    return [lines[q.key] for q in batch]


def generated_line(question: Question, raw: str, reading: str = STRICT) -> dict[str, Any]:
    """The prediction line of a generated, unjudged reply read under READING."""
    parsed, correct, extra = read_reply(question, raw, reading)
    if question.options:
        extra["position"] = question.options.index(parsed) if parsed in question.options else None
    return prediction_line(question, raw, parsed, correct, extra=extra or None)


def load_run(run_dir: Path | str) -> EvalResult:
    """A finished (or partial) run folder read back: its config and predictions, re-scored."""
    run_dir = Path(run_dir)
    config = read_run_config(run_dir)
    predictions = list(read_predictions(run_dir / PREDICTIONS_NAME).values())
    return EvalResult(out_dir=run_dir, config=config, summary=summarize_run(config, predictions),
                      predictions=predictions, asked=0)
