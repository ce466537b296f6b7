"""The evaluation runner: a tiny random LLaVA built from configs, releases written by hand, and a loopback chat
server process (tests/llm_stub.py) for the API models, the blind baseline and the judge."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cftools.evaluate.run import (EvalOptions, PREDICTIONS_NAME, load_run, parse_model_spec, read_predictions, run_eval)
from cftools.evaluate.vlm import HFVisionModel, Prompt, best_option
from fixtures_eval import cfmm_record, cvqa_record, png_bytes, write_release
from killed_runs import eval_held_after, kill_when_held

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tiny(tiny_llava_dir):
    return HFVisionModel.load(str(tiny_llava_dir), device="cpu", dtype="fp32")


@pytest.fixture
def images(tmp_path):
    paths = []
    for i in range(4):
        path = tmp_path / f"img{i}.png"
        path.write_bytes(png_bytes(i, size=30 + 7 * i))
        paths.append(path)
    return paths


def prompts(images):
    return [
        Prompt("Is there a bird?", [images[0]], ["yes", "no"]),
        Prompt("What color would the car be if it were painted?", [images[1]], ["red", "green", "dark blue", "black"]),
        Prompt("How many?", [images[2]], ["3", "14", "0"]),
    ]


def lines_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# -- the model mechanics ------------------------------------------------------------------------------------

def test_batched_scores_equal_one_at_a_time(tiny, images):
    batch = tiny.score_options(prompts(images))
    single = [tiny.score_options([p])[0] for p in prompts(images)]
    for per_batch, per_single in zip(batch, single):
        assert len(per_batch) == len(per_single)
        for a, b in zip(per_batch, per_single):
            assert a["n_tokens"] == b["n_tokens"]
            assert a["sum_logprob"] == pytest.approx(b["sum_logprob"], abs=1e-4)
            assert a["mean_loss"] == pytest.approx(b["mean_loss"], abs=1e-4)


def test_rank_scores_equal_manual_option_losses(tiny, images):
    import torch

    prompt = prompts(images)[1]
    scores = tiny.score_options([prompt])[0]
    prefix = tiny.prefix_text(prompt)
    for option, score in zip(prompt.options, scores):
        reply = " " + option  # the chat template writes "ASSISTANT: <reply></s>"
        assert tiny.reply_text(prompt, prefix, option) == reply
        n = len(tiny.tokenizer(reply, add_special_tokens=False)["input_ids"])
        encoded = tiny.processor(images=[tiny_image(prompt)], text=[prefix + reply], return_tensors="pt")
        with torch.inference_mode():
            logits = tiny.model(**encoded).logits[0].float()
        logprobs = torch.log_softmax(logits[-n - 1:-1], dim=-1)
        targets = encoded["input_ids"][0, -n:]
        manual = float(logprobs.gather(-1, targets.unsqueeze(-1)).sum())
        assert score["n_tokens"] == n
        assert score["sum_logprob"] == pytest.approx(manual, abs=1e-4)
        assert score["mean_loss"] == pytest.approx(-manual / n, abs=1e-5)
    full = tiny.score_options_full(prompt)
    assert [s["sum_logprob"] for s in full] == pytest.approx([s["sum_logprob"] for s in scores], abs=1e-4)


def tiny_image(prompt):
    from cftools.evaluate.vlm import load_image

    return load_image(prompt.images[0])


def test_best_option_rules():
    scores = [{"mean_loss": 1.0, "sum_logprob": -4.0}, {"mean_loss": 0.5, "sum_logprob": -5.0}]
    assert best_option(scores, "mean-loss") == 1
    assert best_option(scores, "sum-logprob") == 0


def test_left_padding_does_not_change_answers(tiny, images):
    asked = [Prompt("Hi?", [images[0]], max_new_tokens=6),
             Prompt("A much longer question about the picture, with many more words in it?", [images[1]],
                    max_new_tokens=6),
             Prompt("How many birds would there be?", [images[2]], max_new_tokens=6)]
    batched = tiny.generate(asked)
    one_by_one = [tiny.generate([p])[0] for p in asked]
    assert batched == one_by_one
    assert tiny.tokenizer.padding_side == "left"


# -- runs -------------------------------------------------------------------------------------------------

def test_generate_run_writes_the_run_folder_and_resumes_from_cache(tiny_llava_dir, mixed_release, tmp_path):
    out = tmp_path / "run"
    result = run_eval(mixed_release, f"hf:{tiny_llava_dir}",
                      options=EvalOptions(batch_size=3, device="cpu", out_dir=out))
    assert result.asked == 14  # 7 items with an image x 2 questions; cvqa-6 has no image
    assert result.summary["skipped"]["no_image"] == 1
    lines = lines_of(out / PREDICTIONS_NAME)
    assert len(lines) == 14
    assert {(line["id"], line["which"]) for line in lines} == {
        (f"{kind}-{i}", which) for kind, i in [("cvqa", 1), ("cvqa", 2), ("cvqa", 3), ("cvqa", 4), ("cvqa", 5),
                                               ("cfmm", 7), ("cfmm", 8)]
        for which in ("original", "counterfactual")}
    for line in lines:
        assert set(line) >= {"id", "which", "raw", "parsed", "scores", "correct", "unknown"}
        assert isinstance(line["raw"], str)
        assert line["unknown"] == (line["parsed"] is None)
    config = json.loads((out / "config.json").read_text())
    assert config["model"] == f"hf:{tiny_llava_dir}" and config["mode"] == "generate" and config["dtype"] == "fp32"
    assert set(result.summary) >= {"cvqa", "cfmm"}
    assert "unknown" in (out / "report.md").read_text()
    assert (out / "report.csv").read_text().startswith("section,group,metric,value,low,high,n")
    png = (out / "report.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    again = run_eval(mixed_release, f"hf:{tiny_llava_dir}",
                     options=EvalOptions(batch_size=5, device="cpu", out_dir=out))
    assert again.asked == 0
    assert len(lines_of(out / PREDICTIONS_NAME)) == 14
    assert again.summary["cvqa"] == result.summary["cvqa"]
    assert (out / "report.png").read_bytes() == png  # deterministic plot


def test_rank_run_scores_every_option(tiny_llava_dir, mixed_release, tmp_path):
    out = tmp_path / "rank"
    result = run_eval(mixed_release, f"hf:{tiny_llava_dir}",
                      options=EvalOptions(mode="rank", score="sum-logprob", batch_size=4, device="cpu", out_dir=out))
    lines = lines_of(out / PREDICTIONS_NAME)
    assert len(lines) == 14
    by_key = {(line["id"], line["which"]): line for line in lines}
    boolean = by_key[("cvqa-4", "original")]
    assert [s["option"] for s in boolean["scores"]] == ["yes", "no"]
    assert [s["option"] for s in by_key[("cvqa-1", "original")]["scores"]] == [str(n) for n in range(21)]
    cfmm = by_key[("cfmm-7", "counterfactual")]
    assert [s["option"] for s in cfmm["scores"]] == ["yellow", "blue", "red", "black"]
    for line in lines:
        best = max(line["scores"], key=lambda s: s["sum_logprob"])["option"]
        assert line["parsed"] == best
        gold = line["gold"]
        assert line["correct"] == (best == gold)
    assert result.config["score"] == "sum-logprob"
    assert "sum-logprob" in (out / "report.md").read_text()


def test_a_run_folder_refuses_another_configuration(tiny_llava_dir, mixed_release, tmp_path):
    from cftools.errors import CftoolsError

    out = tmp_path / "run"
    run_eval(mixed_release, f"hf:{tiny_llava_dir}", options=EvalOptions(device="cpu", out_dir=out, limit=1))
    with pytest.raises(CftoolsError, match="another configuration"):
        run_eval(mixed_release, f"hf:{tiny_llava_dir}",
                 options=EvalOptions(mode="rank", device="cpu", out_dir=out, limit=1))


def test_truncated_last_line_is_dropped_and_asked_again(tmp_path):
    path = tmp_path / PREDICTIONS_NAME
    good = json.dumps({"id": "a", "which": "original", "raw": "2"})
    path.write_text(good + "\n" + '{"id": "a", "which": "counterf', encoding="utf-8")
    done = read_predictions(path)
    assert list(done) == [("a", "original")]
    assert path.read_text(encoding="utf-8") == good + "\n"


def test_malformed_middle_line_names_file_and_line(tmp_path):
    from cftools.errors import InputError

    path = tmp_path / PREDICTIONS_NAME
    path.write_text('{"id": "a", "which": "original"}\nnot json\n{"id": "b", "which": "original"}\n')
    with pytest.raises(InputError, match="line 2"):
        read_predictions(path)


def test_resume_after_kill(tiny_llava_dir, tmp_path):
    records = [cvqa_record(i, "boolean", "yes", "no", "yes/no") for i in range(60)]
    release = write_release(tmp_path / "big-1.0", records, {r["id"]: png_bytes(i) for i, r in enumerate(records)})
    out = tmp_path / "run"
    args = ["eval", str(release), "--model", f"hf:{tiny_llava_dir}", "--batch-size", "1", "--device", "cpu",
            "--out", str(out), "--quiet", "--max-new-tokens", "24"]
    command = [sys.executable, "-m", "cftools.cli", *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("CFTOOLS_WORKSPACE", None)
    # held for good after 5 lines (tests/killed_runs.py): killed there, not wherever a poll catches it
    process = subprocess.Popen(eval_held_after(5, *args), env=env, cwd=tmp_path, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    predictions = out / PREDICTIONS_NAME
    killed_at = kill_when_held(process, predictions, 5)
    assert killed_at == 5
    finished = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr[-2000:]
    lines = lines_of(predictions)
    keys = [(line["id"], line["which"]) for line in lines]
    assert len(keys) == len(set(keys)) == 120
    assert f"{120 - killed_at} questions asked now" in " ".join(finished.stdout.split())


# -- API and blind models (the loopback chat server process) -------------------------------------------------

def text_parts(request: dict) -> list[dict]:
    """The content parts of the user message of a recorded chat request."""
    content = request["body"]["messages"][0]["content"]
    return content if isinstance(content, list) else [{"type": "text", "text": content}]


def test_openai_backend_sends_images_and_uses_the_cache(workspace, mixed_release, tmp_path, monkeypatch, llm_server):
    monkeypatch.setenv("TEST_KEY", "sk-test-secret-123456")
    workspace.config["llm"] = {"base_url": llm_server.base_url, "api_key_env": "TEST_KEY", "backoff_initial": 0.01,
                               "backoff_max": 0.05}
    llm_server.use_reply("llm_replies:eval_answers")
    llm_server.script({"status": 429, "headers": {"retry-after": "0"}, "body": {"error": {"message": "slow down"}}})
    result = run_eval(mixed_release, "openai:gpt-test", options=EvalOptions(out_dir=tmp_path / "api", concurrency=2),
                      workspace=workspace)
    requests = llm_server.requests()
    assert len(requests) == 15  # 14 questions, one 429 retried
    seen = [text_parts(r) for r in requests]
    assert all(parts[0]["type"] == "image_url" and parts[0]["image_url"]["url"].startswith("data:image/png;base64,")
               for parts in seen)
    by_key = {(p["id"], p["which"]): p for p in result.predictions}
    assert by_key[("cvqa-1", "original")]["parsed"] == "2" and by_key[("cvqa-1", "original")]["correct"]
    assert by_key[("cvqa-4", "original")]["parsed"] == "yes" and by_key[("cvqa-4", "original")]["correct"]
    assert by_key[("cfmm-7", "original")]["parsed"] == "red" and by_key[("cfmm-7", "original")]["correct"]
    assert "sk-test-secret" not in (tmp_path / "api" / "config.json").read_text()
    # another run folder, same requests: every answer comes from the store's request cache
    again = run_eval(mixed_release, "openai:gpt-test", options=EvalOptions(out_dir=tmp_path / "api2"),
                     workspace=workspace)
    assert len(llm_server.requests()) == 15 and again.asked == 14
    from cftools.models import EvalRun
    from sqlmodel import select

    with workspace.store.session() as session:
        runs = session.exec(select(EvalRun)).all()
    assert len(runs) == 2 and runs[0].summary["cvqa"]["rows"]


def test_blind_model_gets_no_image_and_lists_what_it_gets_right(mixed_release, tmp_path, monkeypatch, llm_server):
    monkeypatch.delenv("CFTOOLS_WORKSPACE", raising=False)
    llm_server.use_reply("llm_replies:eval_answers")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-blind-000000")
    from cftools.evaluate import run as evaluate
    from cftools.llm import make_backend

    backend = make_backend({"base_url": llm_server.base_url}, backend="openai", model="small")
    answerer = evaluate.ChatAnswerer(backend, with_images=False)
    result = run_eval(mixed_release, "blind:openai:small", options=EvalOptions(out_dir=tmp_path / "blind"),
                      answerer=answerer)
    seen = [text_parts(r) for r in llm_server.requests()]
    assert len(seen) == 16  # the item without an image is asked too
    assert all(parts == [parts[0]] and parts[0]["type"] == "text" for parts in seen)
    right = result.summary["blind_correct"]
    assert {(p["id"], p["which"]) for p in right} == {(p["id"], p["which"]) for p in result.predictions
                                                       if p["correct"]}
    assert right and "Answered right without the image" in (tmp_path / "blind" / "report.md").read_text()


def test_model_specs():
    assert parse_model_spec("hf:/models/llava").target == "/models/llava"
    assert parse_model_spec("blind").kind == "blind" and not parse_model_spec("blind").needs_image
    assert parse_model_spec("blind:openai:gpt-4o").target == "openai:gpt-4o"
    from cftools.errors import CftoolsError

    with pytest.raises(CftoolsError):
        parse_model_spec("llava")


# -- MuCR -----------------------------------------------------------------------------------------------------

def mucr_release(tmp_path):
    import hashlib

    pngs = [png_bytes(50 + i) for i in range(8)]
    names = []
    for data in pngs:
        names.append(f"images/{hashlib.sha256(data).hexdigest()}.png")
    record = {
        "id": "mucr-1", "kind": "mucr", "group": "human", "split": "test", "verified": True, "status": "accepted",
        "image": names[0], "image_sha256": None, "original_question": None, "original_answer": None,
        "answer_type": "other", "question": None, "answer": None, "options": None,
        "data": {"cause_image": names[0], "effect_image": names[1],
                 "c2e_choices": [names[2], names[1], names[3], names[4]], "c2e_answer": 1,
                 "e2c_choices": [names[0], names[5], names[6], names[7]], "e2c_answer": 0,
                 "cue": "catch cold", "false_cues": ["wet", "rain", "run"],
                 "explanations": ["Rain made him ill.", "He got soaked and caught a cold.", "The rain led to a cold."]},
    }
    (tmp_path / "mucr-1.0" / "images").mkdir(parents=True)
    for name, data in zip(names, pngs):  # before the manifest is written, which lists them
        (tmp_path / "mucr-1.0" / name).write_bytes(data)
    return write_release(tmp_path / "mucr-1.0", [record])


def test_mucr_questions_rank_and_judge(tiny_llava_dir, tmp_path, workspace, monkeypatch, llm_server):
    monkeypatch.setenv("JUDGE_KEY", "sk-judge-0000000")
    workspace.config["llm"] = {"base_url": llm_server.base_url, "api_key_env": "JUDGE_KEY"}
    llm_server.use_reply("llm_replies:judge_seven")
    release = mucr_release(tmp_path)
    result = run_eval(release, f"hf:{tiny_llava_dir}",
                      options=EvalOptions(mode="rank", device="cpu", out_dir=tmp_path / "m", judge="openai:judge",
                                          max_new_tokens=8), workspace=workspace)
    by_which = {p["which"]: p for p in result.predictions}
    assert set(by_which) == {"c2e", "e2c", "cue", "exp"}
    assert [s["option"] for s in by_which["c2e"]["scores"]] == ["A", "B", "C", "D"]
    assert by_which["c2e"]["gold"] == "B"
    assert sorted(s["option"] for s in by_which["cue"]["scores"]) == sorted(["catch cold", "wet", "rain", "run"])
    assert by_which["exp"]["similarities"] == [[7.0, 7.0, 7.0]] * 3
    assert by_which["exp"]["parts"] == {"S1": 7.0, "S2": 7.0, "S3": 7.0}
    assert by_which["exp"]["exp_score"] == pytest.approx(7.0)
    assert result.summary["mucr"]["exp"]["value"] == pytest.approx(7.0)
    assert result.summary["mucr"]["c2e"]["n"] == 1
    judged = llm_server.requests()
    assert len(judged) == 3 and all(r["headers"]["authorization"] == "Bearer sk-judge-0000000" for r in judged)


# -- the command line -----------------------------------------------------------------------------------------

def test_cli_runs_without_a_workspace_and_compares(tiny_llava_dir, mixed_release, tmp_path, monkeypatch, run_cli):
    monkeypatch.delenv("CFTOOLS_WORKSPACE", raising=False)
    monkeypatch.chdir(tmp_path)
    result = run_cli("eval", mixed_release, "--model", f"hf:{tiny_llava_dir}", "--device", "cpu", "--limit", "3",
                     "--quiet")
    assert result.exit_code == 0, result.output
    runs = sorted((tmp_path / "runs").iterdir())
    assert len(runs) == 1 and (runs[0] / "report.md").exists()
    assert "C-VQA accuracy" in result.output
    result = run_cli("eval", mixed_release, "--model", f"hf:{tiny_llava_dir}", "--device", "cpu", "--limit", "3",
                     "--mode", "rank", "--quiet")
    assert result.exit_code == 0, result.output
    a, b = sorted((tmp_path / "runs").iterdir())
    compared = run_cli("eval", "compare", a, b)
    assert compared.exit_code == 0, compared.output
    assert "B - A" in compared.output and "counterfactual" in compared.output
    assert load_run(a).summary["answered"] == 6
    assert "compare" in run_cli("eval", "--help").output


def test_rank_never_copies_the_prefix_cache_per_option(tiny, images):
    """Memory grows with batch x prefix once, not x options: every pass over the cache has one row per question
    and the cache is back to the prefix after each option."""
    seen = []

    def spy(module, args, kwargs):
        cache = kwargs.get("past_key_values")
        if cache is not None and cache.get_seq_length():
            seen.append((cache.layers[0].keys.shape[0], cache.get_seq_length()))

    asked = prompts(images)
    handle = tiny.model.register_forward_pre_hook(spy, with_kwargs=True)
    try:
        tiny.score_options(asked)
    finally:
        handle.remove()
    assert len(seen) == max(len(p.options) for p in asked)  # one pass per option slot
    assert {rows for rows, _ in seen} == {len(asked)}
    assert len({length for _, length in seen}) == 1  # cut back to the prefix before every pass
