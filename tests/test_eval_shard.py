"""An eval run split between processes: `--shard I/N` processes run at once and `cftools eval merge`, `accelerate
launch -m cftools eval` (two CPU processes talking over gloo on loopback), the errors, and a killed shard.

The tiny random LLaVA ranks the options (so every line has parsed, correct and option scores). Each question is
asked alone (--batch-size 1) on one thread in every process, so a float is computed the same way whichever
process asks it: the merged run must equal the single-process run bit for bit. (Other batch shapes or thread
counts change the last bits of a score, in a single-process run as much as in a split one.)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from cftools.errors import CftoolsError
from cftools.evaluate.merge import merge_run
from cftools.evaluate.run import EvalOptions, CONFIG_NAME, PREDICTIONS_NAME, load_run, run_eval
from cftools.evaluate.shards import Shard, parse_shard, share
from fixtures_eval import cfmm_record, cvqa_record, png_bytes, write_release
from killed_runs import eval_held_after, kill_when_held

ROOT = Path(__file__).resolve().parent.parent
ACCELERATE = Path(sys.executable).parent / "accelerate"
RANK = {"mode": "rank", "batch_size": 1, "device": "cpu"}
RANK_ARGS = ["--mode", "rank", "--batch-size", "1", "--device", "cpu", "--quiet"]


def small_release(folder: Path, n_cvqa: int = 4) -> Path:
    """C-VQA items (one without an image: skipped) and two CFMM items with options."""
    records = [cvqa_record(i, "boolean" if i % 2 else "numerical-direct", "yes" if i % 2 else "2",
                           "no" if i % 2 else "3", "yes/no" if i % 2 else "number") for i in range(1, n_cvqa + 1)]
    records += [cfmm_record(100, "color"), cfmm_record(101, "color")]
    images = {r["id"]: png_bytes(n) for n, r in enumerate(records) if r["id"] != "cvqa-2"}
    return write_release(folder, records, images)


def lines_by_key(path: Path) -> dict[tuple[str, str], dict]:
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    keys = [(line["id"], line["which"]) for line in lines]
    assert len(keys) == len(set(keys)), f"duplicate predictions in {path}"
    return dict(zip(keys, lines, strict=True))


def subprocess_env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    for name in ("CFTOOLS_WORKSPACE", "WORLD_SIZE", "RANK", "LOCAL_RANK"):
        env.pop(name, None)
    return env


def cftools_command(*args: object) -> list[str]:
    return [sys.executable, "-m", "cftools", *map(str, args)]


@pytest.fixture(scope="module")
def one_thread():
    """Questions computed on one thread here too, like in the subprocesses (OMP_NUM_THREADS=1)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    return small_release(tmp_path_factory.mktemp("shard") / "release-1.0")


@pytest.fixture(scope="module")
def model(tiny_llava_dir) -> str:
    return f"hf:{tiny_llava_dir}"


@pytest.fixture(scope="module")
def tiny(tiny_llava_dir):
    from cftools.evaluate.vlm import HFVisionModel

    return HFVisionModel.load(str(tiny_llava_dir), device="cpu", dtype="fp32")


@pytest.fixture(scope="module")
def single(release, model, tiny, one_thread, tmp_path_factory):
    """The same run in one process: what a split run must equal."""
    return run_eval(release, model, options=EvalOptions(out_dir=tmp_path_factory.mktemp("single") / "run", **RANK),
                    answerer=tiny)


@pytest.fixture(autouse=True)
def no_launcher(monkeypatch):
    for name in ("CFTOOLS_WORKSPACE", "WORLD_SIZE", "RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)


def assert_equals_single(out: Path, single) -> None:
    merged = lines_by_key(out / PREDICTIONS_NAME)
    assert merged == lines_by_key(single.out_dir / PREDICTIONS_NAME)  # same keys, raw, parsed, correct, scores
    assert len(merged) == single.config["questions"] == 10
    assert load_run(out).summary == single.summary
    assert (out / "report.csv").read_text() == (single.out_dir / "report.csv").read_text()


# -- the split ------------------------------------------------------------------------------------------------

def test_the_split_covers_every_question_once_like_accelerate():
    from accelerate import PartialState

    keys = [(f"item-{i}", which) for i in range(7) for which in ("original", "counterfactual")]
    for count in range(1, 6):
        parts = [share(reversed(keys), Shard(i, count)) for i in range(1, count + 1)]
        assert sorted(key for part in parts for key in part) == sorted(keys)
        assert max(map(len, parts)) - min(map(len, parts)) <= 1
        for i, part in enumerate(parts):
            process = SimpleNamespace(num_processes=count, process_index=i)
            with PartialState.split_between_processes(process, sorted(keys)) as theirs:
                assert part == theirs


@pytest.mark.parametrize("text", ["0/2", "3/2", "1/0", "x", "1/2/3", "-1/2", "1 of 2", ""])
def test_bad_shard_values_are_one_clear_usage_error(text, release, run_cli):
    result = run_cli("eval", release, "--model", "blind", "--shard", text)
    assert result.exit_code == 2
    assert f"Invalid value for '--shard': {text!r}" in result.output
    with pytest.raises(CftoolsError):
        parse_shard(text)
    assert parse_shard(" 2 / 3 ") == Shard(2, 3)


def test_shard_is_refused_under_a_launcher_and_a_launch_needs_accelerate(release, run_cli, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    result = run_cli("eval", release, "--model", "blind", "--shard", "1/2")
    assert result.exit_code == 2 and "under accelerate launch" in result.output
    monkeypatch.setitem(sys.modules, "accelerate", None)  # import accelerate fails
    result = run_cli("eval", release, "--model", "blind")
    assert result.exit_code == 1
    assert "started as 2 processes, but the accelerate package is not installed" in result.output


# -- --shard I/N and merge --------------------------------------------------------------------------------------

def test_two_shard_processes_at_once_merge_into_the_single_process_run(release, model, single, tiny, tmp_path,
                                                                       run_cli):
    out = tmp_path / "run"
    shards = [subprocess.Popen(cftools_command("eval", release, "--model", model, "--out", out, "--shard",
                                               f"{i}/2", *RANK_ARGS),
                               env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for i in (1, 2)]
    for i, process in enumerate(shards, start=1):
        stdout, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr[-2000:]
        assert f"shard {i} of 2: 5 questions asked now" in " ".join(stdout.split())
    assert not (out / "report.md").exists() and not (out / PREDICTIONS_NAME).exists()
    assert {p.name for p in out.glob("*shard*")} == {"predictions.shard-1-of-2.jsonl", "predictions.shard-2-of-2.jsonl",
                                                      "shard-1-of-2.json", "shard-2-of-2.json"}
    assert json.loads((out / CONFIG_NAME).read_text()) == single.config

    result = run_cli("eval", "merge", out)
    assert result.exit_code == 0, result.output
    assert "10 predictions merged" in result.output and "C-VQA accuracy" in result.output
    assert_equals_single(out, single)
    assert not list(out.glob("predictions.shard-*"))  # merged: their lines are in predictions.jsonl
    merged = {name: (out / name).read_bytes() for name in (PREDICTIONS_NAME, "report.md", "report.csv")}

    assert run_cli("eval", "merge", out).exit_code == 0  # merging twice gives the same result
    assert merged == {name: (out / name).read_bytes() for name in merged}
    again = run_eval(release, model, options=EvalOptions(out_dir=out, **RANK),
                     answerer=tiny)  # a single-process rerun asks nothing
    assert again.asked == 0 and again.summary == single.summary


def test_accelerate_launch_two_cpu_processes_equals_the_single_process_run(release, model, single, tmp_path):
    out = tmp_path / "run"
    # --multi_gpu is accelerate's multi-process (torchrun) launcher; without a GPU its processes use gloo on CPU
    # (--cpu starts one process). Port 0: a free port, so parallel test runs do not collide.
    command = [str(ACCELERATE), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "0",
               "-m", "cftools", "eval", str(release), "--model", model, "--out", str(out), *RANK_ARGS]
    finished = subprocess.run(command, env=subprocess_env(), capture_output=True, text=True, timeout=300,
                              check=False)
    assert finished.returncode == 0, finished.stderr[-3000:]
    stdout = " ".join(finished.stdout.split())
    assert stdout.count("questions asked now") == 1 and "10 questions asked now" in stdout  # the first process
    assert {p.name for p in out.glob("shard-*.json")} == {"shard-1-of-2.json", "shard-2-of-2.json"}
    assert_equals_single(out, single)


def test_merge_names_missing_and_unfinished_shards_and_partial_merges(release, model, tiny, tmp_path, run_cli):
    out = tmp_path / "run"
    run_eval(release, model, options=EvalOptions(out_dir=out, shard=Shard(2, 2), **RANK), answerer=tiny)
    result = run_cli("eval", "merge", out)
    assert result.exit_code == 1
    assert "shard 1 of 2 has not run (no shard-1-of-2.json)" in " ".join(result.output.split())
    assert not (out / PREDICTIONS_NAME).exists()

    run_eval(release, model, options=EvalOptions(out_dir=out, shard=Shard(1, 2), **RANK), answerer=tiny)
    shard_file = out / "predictions.shard-1-of-2.jsonl"
    lines = shard_file.read_text().splitlines(keepends=True)
    shard_file.write_text("".join(lines[:3]) + lines[3][:20])  # as if killed halfway through a line
    with pytest.raises(CftoolsError, match="shard 1 of 2 has 2 of 5 questions unanswered.*--partial"):
        merge_run(out)
    partial = merge_run(out, partial=True)
    assert partial.summary["answered"] == 8 and shard_file.exists()
    assert run_eval(release, model, options=EvalOptions(out_dir=out, shard=Shard(1, 2), **RANK),
                    answerer=tiny).asked == 2
    assert merge_run(out).summary["answered"] == 10


def test_merge_refuses_shards_of_another_run_and_conflicting_predictions(release, model, tiny, tmp_path):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for shard in (Shard(1, 2), Shard(2, 2)):
        run_eval(release, model, options=EvalOptions(out_dir=ours, shard=shard, **RANK), answerer=tiny)
    run_eval(release, model, options=EvalOptions(out_dir=theirs, shard=Shard(2, 2), score="sum-logprob", **RANK),
             answerer=tiny)
    for name in ("shard-2-of-2.json", "predictions.shard-2-of-2.jsonl"):
        shutil.copy(theirs / name, ours / name)
    with pytest.raises(CftoolsError, match=r"shard-2-of-2.json belongs to another run .*score: 'sum-logprob' -> "
                                           r"'mean-loss'"):
        merge_run(ours)

    for name in ("shard-2-of-2.json", "predictions.shard-2-of-2.jsonl"):
        (ours / name).unlink()
    run_eval(release, model, options=EvalOptions(out_dir=ours, shard=Shard(2, 2), **RANK), answerer=tiny)
    line = json.loads((ours / "predictions.shard-2-of-2.jsonl").read_text().splitlines()[0])
    (ours / PREDICTIONS_NAME).write_text(json.dumps({**line, "parsed": "something else"}) + "\n")
    with pytest.raises(CftoolsError, match="two different predictions"):
        merge_run(ours)


def test_a_folder_with_an_unmerged_split_refuses_another_split(release, model, tiny, tmp_path):
    out = tmp_path / "run"
    run_eval(release, model, options=EvalOptions(out_dir=out, shard=Shard(1, 2), **RANK), answerer=tiny)
    with pytest.raises(CftoolsError, match="holds predictions of a split into 2 not merged yet"):
        run_eval(release, model, options=EvalOptions(out_dir=out, shard=Shard(1, 3), **RANK), answerer=tiny)
    run_eval(release, model, options=EvalOptions(out_dir=out, shard=Shard(2, 2), **RANK), answerer=tiny)
    merge_run(out)
    # merged: a split into 3 may start (it asks nothing) and replaces the old manifests
    assert sum(run_eval(release, model, options=EvalOptions(out_dir=out, shard=Shard(i, 3), **RANK),
                        answerer=tiny).asked
               for i in (1, 2, 3)) == 0
    assert sorted(p.name for p in out.glob("shard-*")) == [f"shard-{i}-of-3.json" for i in (1, 2, 3)]
    assert merge_run(out).summary["answered"] == 10


def test_merge_records_the_run_in_the_store_once(release, model, tiny, tmp_path, workspace):
    from sqlalchemy import func, select

    from cftools.models import EvalRun, Prediction

    out = tmp_path / "run"
    for shard in (Shard(1, 2), Shard(2, 2)):
        run_eval(release, model, options=EvalOptions(out_dir=out, shard=shard, **RANK), answerer=tiny,
                 workspace=workspace)
    with workspace.store.session() as session:
        assert session.execute(select(func.count()).select_from(EvalRun)).scalar_one() == 0  # shards record nothing
    merge_run(out, workspace=workspace)
    merge_run(out, workspace=workspace)
    with workspace.store.session() as session:
        run = session.execute(select(EvalRun)).scalar_one()
        rows = session.execute(select(Prediction).where(Prediction.run_id == run.id)).scalars().all()
    assert {(r.item_key, r.which): r.parsed for r in rows} == {
        key: line["parsed"] for key, line in lines_by_key(out / PREDICTIONS_NAME).items()}
    assert run.summary["answered"] == len(rows) == 10


# -- a killed shard -------------------------------------------------------------------------------------------

def test_a_shard_killed_midway_resumes_without_duplicates(model, tiny, tmp_path):
    release = small_release(tmp_path / "big-1.0", n_cvqa=20)
    out = tmp_path / "run"
    # held for good after 3 lines (tests/killed_runs.py): killed there, not wherever a poll catches it
    command = eval_held_after(3, "eval", release, "--model", model, "--out", out, "--shard", "2/2",
                              "--batch-size", "1", "--device", "cpu", "--quiet", "--max-new-tokens", "8")
    process = subprocess.Popen(command, env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    predictions = out / "predictions.shard-2-of-2.jsonl"
    killed_at = kill_when_held(process, predictions, 3)
    share_size = len(json.loads((out / "shard-2-of-2.json").read_text())["share"])
    assert share_size == 21  # 21 items with an image, 2 questions each, 42 in all
    assert killed_at == 3
    rerun = run_eval(release, model,
                     options=EvalOptions(out_dir=out, shard=Shard(2, 2), batch_size=1, device="cpu",
                                         max_new_tokens=8), answerer=tiny)
    assert rerun.asked == share_size - killed_at  # the cut last line, if any, is asked again
    lines = lines_by_key(predictions)  # no key twice
    assert sorted(lines) == sorted(tuple(key) for key in json.loads((out / "shard-2-of-2.json").read_text())["share"])
