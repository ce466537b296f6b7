"""`cftools export NAME --version V --format lmms-eval`: the release as an lmms-eval group of tasks, one per kind.

The folder `NAME-V-lmms-eval/` holds

    images/                        the images (named by SHA-256), as in every release
    records.jsonl                  the native records (what `cftools eval` reads, so both score the same questions)
    NAME.yaml                      the group NAME: every task below, and its overall score
    NAME_KIND/NAME_KIND.yaml       the task: a local JSON dataset, the kind's paper's way of asking, its metrics
    NAME_KIND/utils.py             the task's functions, delegating to this module
    NAME_KIND/SPLIT.jsonl          one doc per question, in the order `cftools eval` asks them

A kind is asked as its paper asks it: C-VQA and MuCR generate answers (`output_type: generate_until`); CFMM ranks
its options by likelihood (`output_type: multiple_choice`: lmms-eval scores each option as the reply and takes the
lowest mean token loss, as `cftools eval --mode rank --score mean-loss`). A kind whose questions are answered at
different lengths gets a task per length (one lmms-eval task has one max_new_tokens), named by its questions:
MuCR gives NAME_mucr_c2e_e2c (4 tokens) and NAME_mucr_cue (16).

`--tasks NAME` runs the group: lmms-eval reports every task's scores and the group's `accuracy`, the share of all
its questions answered right (each task's `accuracy` weighted by its size). Each task reports only its kind's own
metrics, one per row of the kind's paper table (C-VQA per group original, counterfactual and drop; CFMM acc_b,
acc_c, acc+ per type and the paper's 600-point sums; MuCR C2E, E2C and Cue overall and per facet), named
GROUP__METRIC, read and scored by cftools' own readers and the kind's own `summarize`; so a score from lmms-eval
is the score `cftools eval` gives the same replies (and `cftools eval import` reads lmms-eval's `--log_samples`
files back into a cftools run folder). Free-text questions scored by a judge (MuCR Exp) are left out: lmms-eval
runs no cftools judge.

An item with an edited image (`data.edited_image`, C-VQA and CFMM) has a third doc beside its original and
counterfactual ones, `which: edited`: the original question about the edited image, its target the edited image's
answer (`data.edited_answer`); the task's metrics then include the kind's edited-image rows (`total_edited_paired`:
both the original and the edited image answered right), and `cftools eval import` reports them. An item with an
irrelevant edit (`data.irrelevant_edited_image`) has a fourth doc, `which: irrelevant`: the original question about
the irrelevant-edited image, its target the answer that stays (`data.irrelevant_edited_answer`); the metrics then
include the kind's consistency rows (`total_consistency`, `total_change_iff_relevant`, ...:
`cftools.evaluate.consistency`).

Prompts: each doc holds the prompt `cftools eval` renders; `doc_to_text` wraps it in the model's
`lmms_eval_specific_kwargs` (`pre_prompt`, `post_prompt`; `default` adds nothing), so a prompt can be set per
model in the YAML, as lmms-eval's own tasks do.

Run it with `lmms-eval --model llava_hf --model_args pretrained=MODEL --include_path FOLDER --tasks NAME`
(lmms-eval resolves the YAML's data files against the YAML's folder). `utils.py` imports cftools, so install
cftools beside lmms-eval.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

from cftools.errors import CftoolsError


# ---------------------------------------------------------------- names


def task_name(name: str, kind: str) -> str:
    """lmms-eval task names: lower case, letters, digits and underscores."""
    return re.sub(r"[^a-z0-9_]+", "_", f"{name}_{kind}".lower()).strip("_")


def metric_name(group: str, metric: str) -> str:
    text = re.sub(r"[^a-z0-9]+", "_", f"{group} {metric}".lower()).strip("_")
    return text if text[:1].isalpha() else f"m_{text}"


# ---------------------------------------------------------------- docs


def question_doc(question: Any, release_dir: Path) -> dict[str, Any]:
    """One lmms-eval doc: a question as `cftools eval` asks it (options and facets as JSON text, so every doc
    has the same columns)."""
    images = [Path(p).resolve().relative_to(release_dir.resolve()).as_posix() for p in question.prompt.images]
    return {"item_id": question.item_id, "which": question.which, "kind": question.kind, "group": question.group,
            "gold": question.gold, "answer_type": question.answer_type, "prompt": question.prompt.text,
            "images": images, "options": json.dumps(question.options, ensure_ascii=False),
            "gold_option": question.gold_option, "facets": json.dumps(question.facets or {}, sort_keys=True),
            "max_new_tokens": question.prompt.max_new_tokens}


def gold_line(question: Any) -> dict[str, Any]:
    """A prediction line as if the model had answered right: the metric names the questions can give."""
    from cftools.evaluate.predictions import prediction_line

    return prediction_line(question, question.gold, question.gold_option or question.gold, True)


# The task-level score the group averages: the share of questions answered right.
ACCURACY = "accuracy"
# Rows of a kind's flat report that are no score of the model: chance baselines, and the share of unread replies.
NOT_SCORES = ("random", "unknown")


def is_score(group: str, metric: str) -> bool:
    return not (group.startswith(NOT_SCORES) or metric.startswith(NOT_SCORES))


def kind_metrics(kind: Any, questions: Sequence[Any]) -> list[tuple[str, str]]:
    """(group, metric) of every score the kind reports for these questions: its flat CSV rows that have a value
    and are scores (no chance baseline, no unknown rate)."""
    from cftools.evaluate.predictions import outcomes_from_predictions

    section = kind.hooks.evaluate.summarize(outcomes_from_predictions([gold_line(q) for q in questions]))
    out = []
    for group, metric, value, _ in kind.hooks.evaluate.csv_rows(section):
        number = value.get("value") if isinstance(value, dict) else value
        if number is not None and is_score(str(group), str(metric)) and (str(group), str(metric)) not in out:
            out.append((str(group), str(metric)))
    return out


# ---------------------------------------------------------------- files


class Function(str):
    """A value lmms-eval reads as a Python function of the task's utils.py (YAML tag `!function`)."""


def _function_representer(dumper: Any, value: Function) -> Any:
    return dumper.represent_scalar("!function", str(value))


def dump_yaml(document: dict[str, Any]) -> str:
    """DOCUMENT as YAML, written by PyYAML (lmms-eval's `!function` values are a tag of their own: `Function`)."""
    import yaml

    class TaskDumper(yaml.SafeDumper):
        pass

    TaskDumper.add_representer(Function, _function_representer)
    return yaml.dump(document, Dumper=TaskDumper, sort_keys=False, allow_unicode=True, default_flow_style=False)


def yaml_text(task: str, splits: dict[str, str], metrics: Sequence[tuple[str, str]], max_new_tokens: int,
              version: str, ranked: bool) -> str:
    """The task YAML: generation, or (RANKED) the options scored by likelihood as lmms-eval's multiple_choice."""
    test_split = "test" if "test" in splits else next(iter(splits))
    document: dict[str, Any] = {
        "task": task, "dataset_path": "json", "dataset_kwargs": {"data_files": dict(splits)},
        "test_split": test_split, "doc_to_visual": Function("utils.doc_to_visual"),
        "doc_to_text": Function("utils.doc_to_text")}
    if not ranked:  # lmms-eval takes chat messages for generation only
        document["doc_to_messages"] = Function("utils.doc_to_messages")
    document["lmms_eval_specific_kwargs"] = {"default": {"pre_prompt": "", "post_prompt": ""}}
    if ranked:  # the options scored as replies; lmms-eval puts target_delimiter before each
        document.update({"output_type": "multiple_choice", "doc_to_choice": Function("utils.doc_to_choice"),
                         "doc_to_target": "gold_option", "target_delimiter": ""})
    else:
        document.update({"output_type": "generate_until", "doc_to_target": "gold",
                         "generation_kwargs": {"max_new_tokens": max_new_tokens, "temperature": 0,
                                               "do_sample": False, "num_beams": 1}})
    document["process_results"] = Function("utils.process_results")
    document["metric_list"] = [{"metric": ACCURACY, "aggregation": "mean", "higher_is_better": True}] + [
        {"metric": metric_name(group, metric), "aggregation": Function(f"utils.{metric_name(group, metric)}"),
         "higher_is_better": metric != "drop"} for group, metric in metrics]
    document["metadata"] = {"version": version, "made_by": "cftools export --format lmms-eval"}
    return dump_yaml(document)


def group_yaml_text(group: str, tasks: Sequence[str], version: str) -> str:
    """The group: its tasks and its overall score (the tasks' accuracy, weighted by their number of questions)."""
    return dump_yaml({"group": group, "task": list(tasks),
                      "aggregate_metric_list": [{"metric": ACCURACY, "aggregation": "mean", "weight_by_size": True}],
                      "metadata": {"version": version, "made_by": "cftools export --format lmms-eval"}})


def utils_text(task: str, kind: str, metrics: Sequence[tuple[str, str]], ranked: bool) -> str:
    lines = [f'"""lmms-eval functions of the task {task}, written by `cftools export --format lmms-eval`.',
             "",
             "The docs hold the questions as `cftools eval` asks them; replies are read and scored by cftools (install",
             'it beside lmms-eval), so the scores are those of `cftools eval` on the same replies."""', "",
             "from pathlib import Path", "", "from cftools.release.lmms_eval import TaskFunctions", "",
             f"_task = TaskFunctions(Path(__file__).resolve().parent.parent, {kind!r}, [",
             *[f"    ({group!r}, {metric!r})," for group, metric in metrics], f"], ranked={ranked!r})",
             "doc_to_visual = _task.doc_to_visual", "doc_to_text = _task.doc_to_text",
             "doc_to_messages = _task.doc_to_messages", "doc_to_choice = _task.doc_to_choice",
             "process_results = _task.process_results"]
    lines += [f"{metric_name(g, m)} = _task.aggregation({g!r}, {m!r})" for g, m in metrics]
    return "\n".join(lines) + "\n"


def write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")


def paper_mode(kind: Any) -> str:
    """How the kind's paper asks: rank the options (CFMM) or generate."""
    return "rank" if kind.hooks.evaluate.paper_settings.get("mode") == "rank" else "generate"


def eval_questions(release: Any, mode_of: Any = None) -> dict[str, list[tuple[Any, str]]]:
    """Per kind: (question, split) of every question `cftools eval` asks of the release's items, but judged ones;
    asked as MODE_OF(kind) gives (default: generate)."""
    from cftools.evaluate.questions import PromptTemplates, Wording, build_questions
    from cftools.kinds import get_kind

    by_kind: dict[str, list[Any]] = defaultdict(list)
    for entry in release.items:
        by_kind[entry.record["kind"]].append(entry)
    templates = PromptTemplates(None, Path(release.workspace.root))
    out: dict[str, list[tuple[Any, str]]] = {}
    for kind_name, entries in sorted(by_kind.items()):
        get_kind(kind_name).hooks.evaluate.prepare_eval_items(entries, release.options)
        records = sorted((e.record for e in entries), key=lambda r: r["id"])
        split_of = {r["id"]: r["split"] for r in records}
        mode = mode_of(get_kind(kind_name)) if mode_of else "generate"
        questions, _ = build_questions(release.folder, records, templates, mode, True,
                                       wording=Wording(options=release.options))
        out[kind_name] = [(q, split_of[q.item_id]) for q in questions if not q.judged]
    return out


def write_lmms_eval(release: Any) -> None:
    """The lmms-eval task folders of the release's items (see the module's docstring)."""
    from cftools.release.records import write_records

    folder, name = release.folder, release.name
    asked = eval_questions(release, paper_mode)
    write_records(sorted(release.items, key=lambda e: e.record["id"]), folder / "records.jsonl")
    if not any(asked.values()):
        raise CftoolsError("no question of this release can be asked (items need an image, and MuCR pairs both "
                           "images): nothing to write as lmms-eval tasks")
    tasks = []
    for kind_name, pairs in asked.items():
        for suffix, members in tasks_of(pairs).items():
            tasks.append(task_name(name, kind_name + suffix))
            write_task(folder, tasks[-1], kind_name, members, release.splits, release.version)
    group = task_name(name, "")
    (folder / f"{group}.yaml").write_text(group_yaml_text(group, tasks, release.version), encoding="utf-8")


def tasks_of(pairs: Sequence[tuple[Any, str]]) -> dict[str, list[tuple[Any, str]]]:
    """A kind's questions as tasks: one, or one per answer length where they differ (an lmms-eval task has one
    max_new_tokens; MuCR answers C2E/E2C in 4 tokens, Cue in 16), named by its questions: `_c2e_e2c`, `_cue`."""
    by_length: dict[int, list[tuple[Any, str]]] = defaultdict(list)
    for pair in pairs:
        by_length[pair[0].prompt.max_new_tokens].append(pair)
    if len(by_length) <= 1:
        return {"": list(pairs)}
    out = {}
    for members in by_length.values():
        whichs = sorted({q.which.split(":", 1)[0] for q, _ in members})
        out["_" + "_".join(whichs)] = members
    return out


def write_task(folder: Path, task: str, kind_name: str, pairs: Sequence[tuple[Any, str]],
               splits: dict[str, float], version: str) -> None:
    from cftools.kinds import get_kind

    task_dir = folder / task
    task_dir.mkdir()
    files = {}
    for split in splits:
        docs = [question_doc(q, folder) for q, s in pairs if s == split]
        if docs:
            files[split] = f"{split}.jsonl"
            write_jsonl(task_dir / files[split], docs)
    kind = get_kind(kind_name)
    metrics = kind_metrics(kind, [q for q, _ in pairs])
    max_new = max(q.prompt.max_new_tokens for q, _ in pairs)
    ranked = paper_mode(kind) == "rank" and all(q.options for q, _ in pairs)
    (task_dir / f"{task}.yaml").write_text(yaml_text(task, files, metrics, max_new, version, ranked),
                                           encoding="utf-8")
    (task_dir / "utils.py").write_text(utils_text(task, kind_name, metrics, ranked), encoding="utf-8")


# ---------------------------------------------------------------- what utils.py calls, inside lmms-eval


class TaskFunctions:
    """The functions an exported task's YAML names: docs to prompts and images, replies to prediction lines
    (cftools' readers), prediction lines to the kind's scores."""

    def __init__(self, release_dir: Path, kind: str, metrics: Sequence[tuple[str, str]], ranked: bool = False) -> None:
        self.release_dir = Path(release_dir)
        self.kind = kind
        self.metrics = [metric_name(g, m) for g, m in metrics]
        self.ranked = ranked

    def doc_to_visual(self, doc: dict[str, Any]) -> list:
        from cftools.evaluate.vlm import load_image
        from cftools.release.layout import resolve_image

        return [load_image(resolve_image(self.release_dir, {"id": doc["item_id"], "image": rel}))
                for rel in doc["images"]]

    def doc_to_text(self, doc: dict[str, Any], lmms_eval_specific_kwargs: Any = None) -> str:
        """cftools' prompt within the model's pre_prompt and post_prompt (`lmms_eval_specific_kwargs`)."""
        kwargs = lmms_eval_specific_kwargs or {}
        return f"{kwargs.get('pre_prompt') or ''}{doc['prompt']}{kwargs.get('post_prompt') or ''}"

    def doc_to_messages(self, doc: dict[str, Any], lmms_eval_specific_kwargs: Any = None) -> list[dict[str, Any]]:
        content = [{"type": "image", "url": image} for image in self.doc_to_visual(doc)]
        content.append({"type": "text", "text": self.doc_to_text(doc, lmms_eval_specific_kwargs)})
        return [{"role": "user", "content": content}]

    def doc_to_choice(self, doc: dict[str, Any]) -> list[str]:
        return json.loads(doc["options"]) if doc.get("options") else []

    def question(self, doc: dict[str, Any]) -> Any:
        from cftools.evaluate.questions import Question
        from cftools.evaluate.vlm import Prompt

        options = json.loads(doc["options"]) if doc.get("options") else None
        return Question(item_id=doc["item_id"], which=doc["which"], kind=doc["kind"], group=doc["group"],
                        gold=doc["gold"], answer_type=doc["answer_type"],
                        prompt=Prompt(text=doc["prompt"], images=[], options=options), options=options,
                        gold_option=doc.get("gold_option"), facets=json.loads(doc.get("facets") or "{}") or None)

    def process_results(self, doc: dict[str, Any], results: Sequence[Any]) -> dict[str, Any]:
        """The reply read as `cftools eval` reads it (a ranked question: the option of lowest loss): the question's
        `accuracy` and the same prediction line under every metric's name."""
        line = harness_line(self.question(doc), results, self.ranked)
        return {ACCURACY: 1.0 if line["correct"] else 0.0, **{name: line for name in self.metrics}}

    def aggregation(self, group: str, metric: str):  # noqa: ANN201
        def aggregate(lines: Sequence[dict[str, Any]]) -> float:
            return kind_score(self.kind, lines, group, metric)

        aggregate.__name__ = metric_name(group, metric)
        return aggregate


def harness_line(question: Any, results: Sequence[Any], ranked: bool) -> dict[str, Any]:
    """The prediction line of lmms-eval's RESULTS for QUESTION: a generated reply read by cftools, or (RANKED)
    the option lmms-eval's multiple_choice picks: per option a (loss, is_greedy) pair, the lowest loss wins (its
    models return the mean token loss of the option as the reply; lmms-eval takes the argmin)."""
    from cftools.evaluate.run import generated_line, rank_line

    if ranked:
        losses = [float(result[0] if isinstance(result, (list, tuple)) else result) for result in results]
        if len(losses) != len(question.options or []):
            raise CftoolsError(f"{question.item_id} {question.which}: {len(losses)} option scores for "
                               f"{len(question.options or [])} options")
        return rank_line(question, [{"mean_loss": loss} for loss in losses], "mean-loss")
    reply = results[0] if results else ""
    if isinstance(reply, list):  # a sample file's filtered_resps
        reply = reply[0] if reply else ""
    return generated_line(question, str(getattr(reply, "text", reply) or "").strip())


def kind_score(kind: str, lines: Sequence[dict[str, Any]], group: str, metric: str) -> float:
    """One of the kind's scores over prediction LINES (NaN when the lines give it no value)."""
    from cftools.evaluate.predictions import outcomes_from_predictions
    from cftools.kinds import get_kind

    kind_obj = get_kind(kind)
    ordered = sorted(lines, key=lambda p: (str(p["id"]), str(p["which"])))
    section = kind_obj.hooks.evaluate.summarize(outcomes_from_predictions(ordered))
    for row_group, row_metric, value, _ in kind_obj.hooks.evaluate.csv_rows(section):
        if (str(row_group), str(row_metric)) == (group, metric):
            number = value.get("value") if isinstance(value, dict) else value
            return float(number) if number is not None else math.nan
    return math.nan
