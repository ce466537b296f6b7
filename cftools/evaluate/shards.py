"""A run split between processes: which questions a shard asks, its files, and the launcher it runs under.

Shard I of N (counted from 1) is part of one run: the same run folder and config.json (the split is not part of
the run's identity). It asks a fixed share of the run's questions and writes two files there:

    predictions.shard-I-of-N.jsonl   its predictions, appended and fsync'ed per batch like predictions.jsonl
                                     (the shard's cache: a killed shard resumes where it stopped)
    shard-I-of-N.json                its manifest: the run's identity, the size and SHA-256 of the run's
                                     question list, and the keys of its share (what `cftools eval merge` checks)

The split sorts the question keys and cuts them into N contiguous parts whose sizes differ by at most one, the
larger first (the rule of accelerate's `split_between_processes`): it depends on the question list only, never
on timing or on what is already answered, so every question is asked by exactly one shard, and a shard started
by `--shard I/N` asks what process I-1 of N would ask under `accelerate launch`.

Under `accelerate launch` (torchrun's WORLD_SIZE, or mpirun's, says how many processes there are) each process
is shard RANK+1 of WORLD_SIZE; a plain `cftools eval` sees none of these variables and never starts
torch.distributed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

from cftools.errors import CftoolsError, Hint, InputError
from cftools.evaluate.predictions import read_predictions

Key = tuple[str, str]  # (item id, which question)

_PREDICTIONS = re.compile(r"predictions\.shard-(\d+)-of-(\d+)\.jsonl")
_MANIFEST = re.compile(r"shard-(\d+)-of-(\d+)\.json")
# How launchers say how many processes there are and which one this is: torchrun (what `accelerate launch`
# starts) and the MPI launchers, the variables accelerate itself reads.
WORLD_SIZE_VARIABLES = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
RANK_VARIABLES = ("RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK")
# A process that finishes its share waits at the end for the slowest one (a resumed run's shares can be very
# uneven); torch's default collective timeouts (10 minutes for NCCL) would kill it first. A process that fails
# does not leave the others waiting this long: the launcher stops them all.
WAIT_FOR_SHARDS = timedelta(days=7)


@dataclass(frozen=True, order=True)
class Shard:
    index: int  # 1-based
    count: int

    @property
    def predictions_name(self) -> str:
        return f"predictions.shard-{self.index}-of-{self.count}.jsonl"

    @property
    def manifest_name(self) -> str:
        return f"shard-{self.index}-of-{self.count}.json"

    def __str__(self) -> str:
        return f"shard {self.index} of {self.count}"


def parse_shard(text: str) -> Shard:
    """'I/N' (shard I of N, counted from 1) as a Shard; a one-line error for anything else."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if not match:
        raise CftoolsError(f"{text!r} is not I/N (shard I of N, counted from 1: e.g. 1/2)")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1 or not 1 <= index <= count:
        raise CftoolsError(f"{text!r}: shard I of N needs 1 <= I <= N (counted from 1: e.g. 1/2 and 2/2)")
    return Shard(index, count)


def share(keys: Iterable[Key], shard: Shard) -> list[Key]:
    """SHARD's part of the question KEYS: the sorted keys cut into contiguous parts, sizes differing by at most one."""
    ordered = sorted(keys)
    size, extra = divmod(len(ordered), shard.count)
    i = shard.index - 1
    start = i * size + min(i, extra)
    return ordered[start:start + size + (1 if i < extra else 0)]


def questions_sha256(keys: Iterable[Key]) -> str:
    """SHA-256 of a run's question list: shards of one run were split from the same list."""
    return hashlib.sha256(json.dumps(sorted(keys)).encode("utf-8")).hexdigest()


def write_text_atomically(path: Path, text: str) -> None:
    """Write PATH whole or not at all: a temp file beside it, then os.replace (several shards may write at once)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# -- the files of a split ---------------------------------------------------------------------------------

def _find(run_dir: Path, pattern: re.Pattern) -> dict[Shard, Path]:
    found = {}
    for path in sorted(Path(run_dir).glob("*shard-*-of-*.json*")):
        match = pattern.fullmatch(path.name)
        if match:
            found[Shard(int(match.group(1)), int(match.group(2)))] = path
    return found


def shard_prediction_files(run_dir: Path) -> dict[Shard, Path]:
    return _find(run_dir, _PREDICTIONS)


def shard_manifests(run_dir: Path) -> dict[Shard, Path]:
    return _find(run_dir, _MANIFEST)


def build_manifest(shard: Shard, identity: Mapping[str, Any], keys: Sequence[Key]) -> dict[str, Any]:
    identity = json.loads(json.dumps(dict(identity)))  # as read back, so manifests compare equal
    return {"shard": shard.index, "shards": shard.count, "identity": identity, "questions": len(keys),
            "questions_sha256": questions_sha256(keys), "share": [list(key) for key in share(keys, shard)]}


def read_manifest(path: Path) -> dict[str, Any]:
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        manifest["share"] = [(str(item), str(which)) for item, which in manifest["share"]]
        if not isinstance(manifest["identity"], dict) or not isinstance(manifest["questions_sha256"], str):
            raise TypeError
        return manifest
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError):
        raise InputError(path, "not a shard manifest (delete it and rerun that shard)") from None


def same_split(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two manifests are shards of one split of one run."""
    return all(a.get(key) == b.get(key) for key in ("shards", "identity", "questions_sha256"))


def other_split(theirs: Mapping[str, Any], mine: Mapping[str, Any]) -> str:
    """How manifest THEIRS differs from MINE, in words."""
    if theirs.get("identity") != mine.get("identity"):
        return "another run"
    if theirs.get("shards") != mine.get("shards"):
        return f"a split into {theirs.get('shards')}"
    return ANOTHER_LIST


ANOTHER_LIST = "another question list"


def unmerged(run_dir: Path, split: str, predictions_name: str) -> str:
    return (f"{run_dir} holds predictions of {split} not merged yet ({predictions_name}): finish that split and run "
            f"`cftools eval merge {run_dir}`, or remove its shard files")


def start_shard(run_dir: Path, shard: Shard, identity: Mapping[str, Any], keys: Sequence[Key]) -> list[Key]:
    """Write SHARD's manifest in RUN_DIR and return its share of KEYS.

    Refuses a folder that holds predictions of another split not merged yet (another N, or another question
    list); the manifests of a split that was merged (its prediction files are gone) are stale and removed.
    """
    mine = build_manifest(shard, identity, keys)
    for other, path in shard_manifests(run_dir).items():
        try:
            theirs = read_manifest(path)
        except FileNotFoundError:  # a sibling shard removed it first
            continue
        if same_split(theirs, mine):
            continue
        if (run_dir / other.predictions_name).exists():
            split = other_split(theirs, mine)
            asked = f"{ANOTHER_LIST} (was {{limit}} the same?)"  # another list: the CLI asks about its option
            hint = (Hint(unmerged(run_dir, asked, other.predictions_name), limit="--limit")
                    if split == ANOTHER_LIST else None)
            raise CftoolsError(unmerged(run_dir, split, other.predictions_name), hint=hint)
        path.unlink(missing_ok=True)
    write_text_atomically(run_dir / shard.manifest_name, json.dumps(mine, sort_keys=True) + "\n")
    return [tuple(key) for key in mine["share"]]


def gather_predictions(own: Optional[Path], others: Iterable[Path]) -> dict[Key, dict[str, Any]]:
    """Every prediction in OWN (this process's log: a cut last line is cut off) and OTHERS (read as they are:
    another process may be writing them). One question answered differently in two files is an error."""
    found: dict[Key, dict[str, Any]] = read_predictions(own) if own is not None else {}
    source = {key: own for key in found}
    for path in others:
        try:
            lines = read_predictions(path, truncate=False)
        except FileNotFoundError:  # merged and removed meanwhile: its lines are in predictions.jsonl
            continue
        for key, line in lines.items():
            if key in found and found[key] != line:
                raise CftoolsError(f"{key[0]} ({key[1]}) has two different predictions, in {source[key].name} "
                                   f"and {path.name}: they are not of one run; remove the wrong file")
            found.setdefault(key, line)
            source.setdefault(key, path)
    return found


# -- the launcher -------------------------------------------------------------------------------------------

def _first_int(variables: Sequence[str], environ: Mapping[str, str]) -> Optional[int]:
    for name in variables:
        value = environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return None


def launched_processes(environ: Mapping[str, str] = os.environ) -> int:
    """How many processes a launcher (accelerate launch, torchrun, mpirun) started; 1 without one."""
    return _first_int(WORLD_SIZE_VARIABLES, environ) or 1


def is_main_process(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this is the launcher's first process (or no launcher started it)."""
    return launched_processes(environ) == 1 or not _first_int(RANK_VARIABLES, environ)


def launch_state(cpu: bool) -> Any:
    """accelerate's PartialState for a launched run (starts torch.distributed: gloo on CPU, NCCL on GPUs)."""
    try:
        from accelerate import PartialState
    except ImportError:
        raise CftoolsError(f"cftools eval was started as {launched_processes()} processes, but the accelerate "
                           "package is not installed: pip install 'cftools[eval]'", hint=Hint(
                               "{message} (or run each process with {shard} I/N and merge with `cftools eval merge "
                               "RUN`)", shard="--shard")) from None
    return PartialState(cpu=cpu, timeout=WAIT_FOR_SHARDS)
