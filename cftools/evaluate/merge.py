"""A split run made whole: `merge_run` (what `cftools eval merge RUN` does) and `run_launched` (every process of
`accelerate launch` asks its shard, then the first one merges).

Merging checks that the shards belong to the run (their manifests carry the run's identity and the question
list they were split from), that every shard ran and answered its whole share (else it names the shards left
to rerun, unless `partial`), then writes predictions.jsonl (every prediction of the run folder, in key order,
replaced whole), the reports and the store's EvalRun exactly as a single-process run does
(`cftools.evaluate.run.finish_run`). A question found twice with the same line counts once; with two different
lines it is an error. After a complete merge the shards' prediction files are removed (their lines are in
predictions.jsonl, which a later run of any shape reads as its cache); their manifests stay, so merging again
gives the same result.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Optional

from cftools.errors import CftoolsError, Hint
from cftools.evaluate.answerers import parse_model_spec
from cftools.evaluate.predictions import EvalResult, read_predictions
from cftools.evaluate.run import (PREDICTIONS_NAME, EvalOptions, differences, finish_run, identity_of, read_run_config,
                                  run_eval)
from cftools.evaluate.shards import (Key, Shard, gather_predictions, launch_state, read_manifest, shard_manifests,
                                     shard_prediction_files, write_text_atomically)


def merge_run(run_dir: Path | str, workspace: Any = None, partial: bool = False) -> EvalResult:
    """Merge the shards of RUN_DIR into predictions.jsonl and the reports; the merged run's result."""
    run_dir = Path(run_dir)
    config = read_run_config(run_dir)
    manifests = {shard: read_manifest(path) for shard, path in shard_manifests(run_dir).items()}
    files = shard_prediction_files(run_dir)
    if not manifests and not files:
        raise CftoolsError(f"{run_dir} holds no shards to merge (no shard-I-of-N.json): it was not split")
    check_belongs(run_dir, config, manifests)
    count = split_count(run_dir, manifests, files)
    orphans = sorted(set(files) - set(manifests))
    if orphans:
        raise CftoolsError(f"{files[orphans[0]].name} has no {orphans[0].manifest_name}: it is not a shard of "
                           f"this run; remove it")
    answered = gather_predictions(None, [run_dir / PREDICTIONS_NAME, *files.values()])
    shares = {shard: set(manifest["share"]) for shard, manifest in manifests.items()}
    check_files_hold_their_share(files, shares)
    missing = [Shard(i, count) for i in range(1, count + 1) if Shard(i, count) not in manifests]
    unanswered = {shard: len(share - answered.keys()) for shard, share in sorted(shares.items())}
    if not partial and (missing or any(unanswered.values())):
        raise CftoolsError(unfinished_message(run_dir, missing, unanswered, shares), hint=Hint(
            "{message}. Run those shards (cftools eval RELEASE ... {shard} I/N with the same options) and merge again, "
            "or merge what there is with {partial}", shard="--shard", partial="--partial"))
    write_text_atomically(run_dir / PREDICTIONS_NAME,
                          "".join(json.dumps(answered[key], ensure_ascii=False, sort_keys=True) + "\n"
                                  for key in sorted(answered)))
    required = set().union(*shares.values())
    # a shard that never ran has an unknown share: a partial merge then reports every answered question
    reported = [answered[key] for key in sorted(answered) if key in required or missing]
    result = finish_run(run_dir, config, reported, workspace=workspace)
    if not partial:
        for path in files.values():
            path.unlink(missing_ok=True)
    return result


def check_belongs(run_dir: Path, config: dict[str, Any], manifests: dict[Shard, dict[str, Any]]) -> None:
    """Every manifest carries the identity of RUN_DIR's config.json; else name the shard and what differs."""
    identity = identity_of(config)
    for shard, manifest in sorted(manifests.items()):
        differing = differences(manifest["identity"], identity)
        if differing:
            raise CftoolsError(f"{shard.manifest_name} belongs to another run than {run_dir}/config.json "
                               f"({'; '.join(differing)}); remove its shard files or merge it in its own folder")


def split_count(run_dir: Path, manifests: dict[Shard, dict[str, Any]], files: dict[Shard, Path]) -> int:
    """The N of the shards in RUN_DIR: one N, split from one question list; else an error naming both."""
    counts = sorted({shard.count for shard in [*manifests, *files]})
    if len(counts) > 1:
        raise CftoolsError(f"{run_dir} holds shards of splits into {' and '.join(map(str, counts))} processes; "
                           "merge needs one split: remove the other's shard files")
    lists = {manifest["questions_sha256"] for manifest in manifests.values()}
    if len(lists) > 1:
        raise CftoolsError(f"the shards in {run_dir} were split from different question lists", hint=Hint(
            "{message} (were {limit} and the release the same?); rerun them alike", limit="--limit"))
    return counts[0]


def check_files_hold_their_share(files: dict[Shard, Path], shares: dict[Shard, set[Key]]) -> None:
    """A shard's prediction file holds questions of its share only (else it is another split's file)."""
    for shard, path in sorted(files.items()):
        stray = sorted(set(read_predictions(path, truncate=False)) - shares[shard])
        if stray:
            raise CftoolsError(f"{path.name} holds questions that are not {shard}'s share (e.g. {stray[0][0]} "
                               f"({stray[0][1]})): it is not a shard of this split; remove it")


def unfinished_message(run_dir: Path, missing: list[Shard], unanswered: dict[Shard, int],
                       shares: dict[Shard, set[Key]]) -> str:
    parts = [f"{shard} has not run (no {shard.manifest_name})" for shard in missing]
    parts += [f"{shard} has {n} of {len(shares[shard])} questions unanswered" for shard, n in unanswered.items() if n]
    return f"cannot merge {run_dir}: {'; '.join(parts)}"


# -- accelerate launch ----------------------------------------------------------------------------------------

def process_device(state: Any, device: str) -> str:
    """Where this process loads an hf: model: with --device auto, the launcher's device for it (accelerate has
    made this process's GPU the current one, so "cuda" is its own GPU)."""
    return state.device.type if device == "auto" else device


def wants_cpu(model: str, device: str) -> bool:
    """Whether the processes talk over gloo on CPU: no GPU asked for or present, or a model that needs none."""
    import torch

    return device == "cpu" or parse_model_spec(model).kind != "hf" or not torch.cuda.is_available()


def run_launched(release_dir: Path | str, model: str, *, options: EvalOptions = EvalOptions(), workspace: Any = None,
                 progress: Optional[Callable[[int, int], None]] = None,
                 notify: Optional[Callable[[str], None]] = None,
                 waiting: Callable[[str], contextlib.AbstractContextManager] = lambda what: contextlib.nullcontext(),
                 ) -> Optional[EvalResult]:
    """One process of `accelerate launch -m cftools eval ...`: ask this process's shard; once every process
    has finished, the first one merges the run and returns it, the others return None."""
    state = launch_state(cpu=wants_cpu(model, options.device))  # first: it says so if accelerate is missing
    from accelerate.utils import gather_object

    shard = Shard(state.process_index + 1, state.num_processes)
    main = state.is_main_process
    own = replace(options, device=process_device(state, options.device), shard=shard)
    result = run_eval(release_dir, model, options=own, workspace=workspace, progress=progress if main else None,
                      notify=notify if main else None, waiting=waiting)
    asked = gather_object([result.asked])  # waits for every process: all shards are written
    state.wait_for_everyone()
    end_process_group()  # nothing more is said between processes; a group left open can abort one at exit
    if not main:
        return None
    merged = merge_run(result.out_dir, workspace=workspace)
    merged.asked, merged.notes = sum(asked), result.notes
    return merged


def end_process_group() -> None:
    """Close torch.distributed's process group, so no process exits with gloo's threads still running (which
    aborted a launched process: "terminate called without an active exception")."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
