"""`cftools export NAME --version V --format lmms-eval`: the release as lmms-eval tasks, one per kind.

The folder `NAME-V-lmms-eval/` holds

    images/                        the images (named by SHA-256), as in every release
    records.jsonl                  the native records (what `cftools eval` reads, so both score the same questions)
    NAME_KIND/NAME_KIND.yaml       the task: a local JSON dataset, generate_until, the kind's own metrics
    NAME_KIND/utils.py             the task's functions, delegating to this module
    NAME_KIND/SPLIT.jsonl          one doc per question, in the order `cftools eval` asks them

A kind whose questions are answered at different lengths gets a task per length (one lmms-eval task has one
max_new_tokens), named by its questions: MuCR gives NAME_mucr_c2e_e2c (4 tokens) and NAME_mucr_cue (16). Every
task has the tag NAME, so `--tasks NAME` runs them all.

Run it with `lmms-eval --model llava_hf --model_args pretrained=MODEL --include_path FOLDER --tasks NAME_KIND`
(lmms-eval resolves the YAML's data files against the YAML's folder). `utils.py` imports cftools, so install
cftools beside lmms-eval: the docs carry the prompts `cftools eval` renders, and the replies are read and scored
by cftools' own readers and the kind's own `summarize` (C-VQA per group, original and counterfactual; CFMM acc_b,
acc_c, acc+ per type and the paper's 600-point sums; MuCR C2E, E2C and Cue), so a score from lmms-eval is the
score `cftools eval --mode generate` gives the same model. Each metric is one row of the kind's flat CSV report
(`Kind.csv_rows`), named GROUP__METRIC. Free-text questions scored by a judge (MuCR Exp) are left out: lmms-eval
runs no cftools judge.
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


def kind_metrics(kind: Any, questions: Sequence[Any]) -> list[tuple[str, str]]:
    """(group, metric) of every score the kind reports for these questions (its flat CSV rows with a value)."""
    from cftools.evaluate.predictions import outcomes_from_predictions

    section = kind.summarize(outcomes_from_predictions([gold_line(q) for q in questions]))
    out = []
    for group, metric, value, _ in kind.csv_rows(section):
        number = value.get("value") if isinstance(value, dict) else value
        if number is not None and (str(group), str(metric)) not in out:
            out.append((str(group), str(metric)))
    return out


# ---------------------------------------------------------------- files


class Function(str):
    """A value lmms-eval reads as a Python function of the task's utils.py (YAML tag `!function`)."""


def _function_representer(dumper: Any, value: Function) -> Any:
    return dumper.represent_scalar("!function", str(value))


def yaml_text(task: str, tag: str, splits: dict[str, str], metrics: Sequence[tuple[str, str]],
              max_new_tokens: int, version: str) -> str:
    """The task YAML, written by PyYAML (lmms-eval's `!function` values are a tag of their own: `Function`)."""
    import yaml

    class TaskDumper(yaml.SafeDumper):
        pass

    TaskDumper.add_representer(Function, _function_representer)
    test_split = "test" if "test" in splits else next(iter(splits))
    document = {
        "task": task, "tag": tag, "dataset_path": "json", "dataset_kwargs": {"data_files": dict(splits)},
        "test_split": test_split, "output_type": "generate_until",
        "doc_to_visual": Function("utils.doc_to_visual"), "doc_to_text": Function("utils.doc_to_text"),
        "doc_to_messages": Function("utils.doc_to_messages"), "doc_to_target": "gold",
        "generation_kwargs": {"max_new_tokens": max_new_tokens, "temperature": 0, "do_sample": False,
                              "num_beams": 1},
        "process_results": Function("utils.process_results"),
        "metric_list": [{"metric": metric_name(group, metric),
                         "aggregation": Function(f"utils.{metric_name(group, metric)}"),
                         "higher_is_better": not (metric.startswith("unknown") or metric == "drop")}
                        for group, metric in metrics],
        "metadata": {"version": version, "made_by": "cftools export --format lmms-eval"},
    }
    return yaml.dump(document, Dumper=TaskDumper, sort_keys=False, allow_unicode=True, default_flow_style=False)


def utils_text(task: str, kind: str, metrics: Sequence[tuple[str, str]]) -> str:
    lines = [f'"""lmms-eval functions of the task {task}, written by `cftools export --format lmms-eval`.',
             "",
             "The docs hold the questions as `cftools eval` asks them; replies are read and scored by cftools (install",
             'it beside lmms-eval), so the scores are those of `cftools eval --mode generate`."""', "",
             "from pathlib import Path", "", "from cftools.release.lmms_eval import TaskFunctions", "",
             f"_task = TaskFunctions(Path(__file__).resolve().parent.parent, {kind!r}, [",
             *[f"    ({group!r}, {metric!r})," for group, metric in metrics], "])",
             "doc_to_visual = _task.doc_to_visual", "doc_to_text = _task.doc_to_text",
             "doc_to_messages = _task.doc_to_messages", "process_results = _task.process_results"]
    lines += [f"{metric_name(g, m)} = _task.aggregation({g!r}, {m!r})" for g, m in metrics]
    return "\n".join(lines) + "\n"


def write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")


def eval_questions(items: Sequence[Any], folder: Path, context: Any) -> dict[str, list[tuple[Any, str]]]:
    """Per kind: (question, split) of every question `cftools eval --mode generate` asks, but judged ones."""
    from cftools.evaluate.questions import PromptTemplates, build_questions
    from cftools.kinds import get_kind

    by_kind: dict[str, list[Any]] = defaultdict(list)
    for entry in items:
        by_kind[entry.record["kind"]].append(entry)
    templates = PromptTemplates(None, Path(context.workspace.root))
    out: dict[str, list[tuple[Any, str]]] = {}
    for kind_name, entries in sorted(by_kind.items()):
        get_kind(kind_name).prepare_eval_items(entries, context.options)
        records = sorted((e.record for e in entries), key=lambda r: r["id"])
        split_of = {r["id"]: r["split"] for r in records}
        questions, _ = build_questions(folder, records, templates, "generate", True, options=context.options)
        out[kind_name] = [(q, split_of[q.item_id]) for q in questions if not q.judged]
    return out


def write_lmms_eval(items: list, folder: Path, name: str, splits: dict[str, float], context: Any) -> None:
    """The lmms-eval task folders of ITEMS (see the module's docstring)."""
    from cftools.release.records import write_records

    asked = eval_questions(items, folder, context)
    write_records(sorted(items, key=lambda e: e.record["id"]), folder / "records.jsonl")
    if not any(asked.values()):
        raise CftoolsError("no question of this release can be asked (items need an image, and MuCR pairs both "
                           "images): nothing to write as lmms-eval tasks")
    for kind_name, pairs in asked.items():
        for suffix, members in tasks_of(pairs).items():
            write_task(folder, task_name(name, kind_name + suffix), task_name(name, ""), kind_name, members, splits,
                       context.version)


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


def write_task(folder: Path, task: str, tag: str, kind_name: str, pairs: Sequence[tuple[Any, str]],
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
    metrics = kind_metrics(get_kind(kind_name), [q for q, _ in pairs])
    max_new = max(q.prompt.max_new_tokens for q, _ in pairs)
    (task_dir / f"{task}.yaml").write_text(yaml_text(task, tag, files, metrics, max_new, version), encoding="utf-8")
    (task_dir / "utils.py").write_text(utils_text(task, kind_name, metrics), encoding="utf-8")


# ---------------------------------------------------------------- what utils.py calls, inside lmms-eval


class TaskFunctions:
    """The functions an exported task's YAML names: docs to prompts and images, replies to prediction lines
    (cftools' readers), prediction lines to the kind's scores."""

    def __init__(self, release_dir: Path, kind: str, metrics: Sequence[tuple[str, str]]) -> None:
        self.release_dir = Path(release_dir)
        self.kind = kind
        self.metrics = [metric_name(g, m) for g, m in metrics]

    def doc_to_visual(self, doc: dict[str, Any]) -> list:
        from cftools.evaluate.vlm import load_image
        from cftools.release.layout import resolve_image

        return [load_image(resolve_image(self.release_dir, {"id": doc["item_id"], "image": rel}))
                for rel in doc["images"]]

    def doc_to_text(self, doc: dict[str, Any], lmms_eval_specific_kwargs: Any = None) -> str:
        return doc["prompt"]

    def doc_to_messages(self, doc: dict[str, Any], lmms_eval_specific_kwargs: Any = None) -> list[dict[str, Any]]:
        content = [{"type": "image", "url": image} for image in self.doc_to_visual(doc)]
        content.append({"type": "text", "text": doc["prompt"]})
        return [{"role": "user", "content": content}]

    def question(self, doc: dict[str, Any]) -> Any:
        from cftools.evaluate.questions import Question
        from cftools.evaluate.vlm import Prompt

        options = json.loads(doc["options"]) if doc.get("options") else None
        return Question(item_id=doc["item_id"], which=doc["which"], kind=doc["kind"], group=doc["group"],
                        gold=doc["gold"], answer_type=doc["answer_type"],
                        prompt=Prompt(text=doc["prompt"], images=[], options=options), options=options,
                        gold_option=doc.get("gold_option"), facets=json.loads(doc.get("facets") or "{}") or None)

    def process_results(self, doc: dict[str, Any], results: Sequence[Any]) -> dict[str, Any]:
        """The reply read as `cftools eval` reads it: the same prediction line under every metric's name."""
        from cftools.evaluate.predictions import prediction_line, read_generated

        reply = results[0] if results else ""
        raw = str(getattr(reply, "text", reply) or "").strip()
        question = self.question(doc)
        parsed, correct = read_generated(question, raw)
        line = prediction_line(question, raw, parsed, correct)
        return {name: line for name in self.metrics}

    def aggregation(self, group: str, metric: str):  # noqa: ANN201
        def aggregate(lines: Sequence[dict[str, Any]]) -> float:
            return kind_score(self.kind, lines, group, metric)

        aggregate.__name__ = metric_name(group, metric)
        return aggregate


def kind_score(kind: str, lines: Sequence[dict[str, Any]], group: str, metric: str) -> float:
    """One of the kind's scores over prediction LINES (NaN when the lines give it no value)."""
    from cftools.evaluate.predictions import outcomes_from_predictions
    from cftools.kinds import get_kind

    kind_obj = get_kind(kind)
    ordered = sorted(lines, key=lambda p: (str(p["id"]), str(p["which"])))
    section = kind_obj.summarize(outcomes_from_predictions(ordered))
    for row_group, row_metric, value, _ in kind_obj.csv_rows(section):
        if (str(row_group), str(row_metric)) == (group, metric):
            number = value.get("value") if isinstance(value, dict) else value
            return float(number) if number is not None else math.nan
    return math.nan
