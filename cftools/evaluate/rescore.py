"""Score changes between two releases traced to the edits (`cftools release diff A B`), without asking any model
again: every stored run of A is rescored on B's items from its stored predictions.

For each run and each of its questions (per kind and question: C-VQA's and CFMM's `original` and `counterfactual`,
MuCR's `c2e`, `e2c` and `cue`, ...) the score is the share answered right (`metrics.exact_accuracy`, kept as an
exact fraction). It moves from A to B along one path, one kind of edit at a time:

    A          the run's score on A (every question it answered)
    removed    the questions of items B no longer has are dropped
    stale      the questions of items with new images or a reworded question are dropped: the model was shown
               something else, so its answer says nothing about B's item (not comparable)
    relabelled the questions of relabelled items are rescored against B's gold, with the code the run used
               (`run.rank_correct` for a ranked answer, `run.generated_line` for a generated reply, under the
               run's reading); a question B no longer asks of such an item is dropped here
    B          = the score on B's comparable items (unchanged and relabelled)

Each part is the change of the score at its step, so removed + stale + relabelled = B - A exactly (asserted).
Removing items changes the denominator: a part is "what this step did to the score", not a count of items.
Questions B asks that have no comparable prediction (added items, and new questions of relabelled items) are
unscored: with u of them, B's score on all its questions lies between c/(n+u) (all wrong) and (c+u)/(n+u) (all
right), c of n being B's comparable result; the change A -> B is bounded the same way. Judged answers (MuCR's
Exp, scored by a judge against references) are not rescored and stay out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterable, Optional

from cftools.boundary import public_spec
from cftools.errors import CftoolsError, InputError
from cftools.evaluate.metrics import exact_accuracy
from cftools.release.diff import ADDED, RELABELLED, REMOVED, STALE, ReleaseDiff

STEPS = ("a", "removed", "stale", "b")  # the tallies along the path
PARTS = ("removed", "stale", "relabelled")  # the changes between them


@dataclass
class Tally:
    correct: int = 0
    n: int = 0

    def add(self, correct: bool) -> None:
        self.correct += bool(correct)
        self.n += 1

    @property
    def value(self) -> Optional[Fraction]:
        return exact_accuracy(self.correct, self.n)


@dataclass
class QuestionChange:
    """One question of one kind in one run: its tallies along the path, and the questions left unscored."""

    kind: str
    which: str
    tallies: dict[str, Tally] = field(default_factory=lambda: {step: Tally() for step in STEPS})
    unscored: int = 0

    def parts(self) -> dict[str, Optional[Fraction]]:
        values = [self.tallies[step].value for step in STEPS]
        parts = {name: (after - before if before is not None and after is not None else None)
                 for name, before, after in zip(PARTS, values, values[1:])}
        change = self.change
        if change is not None and all(p is not None for p in parts.values()):
            assert sum(parts.values()) == change, "the parts of a score change must add up to the change"
        return parts

    @property
    def change(self) -> Optional[Fraction]:
        a, b = self.tallies["a"].value, self.tallies["b"].value
        return b - a if a is not None and b is not None else None

    def bound(self) -> Optional[tuple[Fraction, Fraction]]:
        """B's score on all its questions, the unscored ones counted all wrong and all right."""
        b = self.tallies["b"]
        total = b.n + self.unscored
        return (Fraction(b.correct, total), Fraction(b.correct + self.unscored, total)) if total else None

    def as_dict(self) -> dict[str, Any]:
        def number(value: Optional[Fraction]) -> Optional[float]:
            return None if value is None else float(value)

        a = self.tallies["a"].value
        bound = self.bound()
        return {"kind": self.kind, "question": self.which,
                **{step: {"value": number(t.value), "correct": t.correct, "n": t.n} for step, t in self.tallies.items()},
                "parts": {name: number(value) for name, value in self.parts().items()},
                "parts_exact": {name: None if value is None else str(value) for name, value in self.parts().items()},
                "change": number(self.change), "change_exact": None if self.change is None else str(self.change),
                "unscored": self.unscored,
                "b_with_unscored": None if bound is None else [float(bound[0]), float(bound[1])],
                "change_with_unscored": (None if bound is None or a is None
                                         else [float(bound[0] - a), float(bound[1] - a)])}


@dataclass
class RunChange:
    run: str
    model: str
    mode: str
    questions: list[QuestionChange]
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"run": self.run, "model": self.model, "mode": self.mode,
                "questions": [q.as_dict() for q in self.questions], "notes": self.notes}


@dataclass
class StoredRun:
    out_dir: Path
    config: dict[str, Any]
    run_id: Optional[int] = None  # its EvalRun row, when the store has one


# -- finding the runs of A ----------------------------------------------------------------------------------------

def stored_runs(store: Any, manifest_sha256: str, run_dirs: Iterable[Path] = ()) -> list[StoredRun]:
    """The runs of the release whose manifest has MANIFEST_SHA256: the store's eval runs, and RUN_DIRS (run folders
    named by hand, which must be of that release)."""
    from cftools.evaluate.run import CONFIG_NAME, read_run_config

    runs: dict[str, StoredRun] = {}
    if store is not None:
        from sqlalchemy import select

        from cftools.models import EvalRun

        with store.session() as session:
            for run_id, out_dir, config in session.execute(select(EvalRun.id, EvalRun.out_dir, EvalRun.config)):
                if isinstance(config, dict) and config.get("release_manifest_sha256") == manifest_sha256:
                    runs[str(Path(out_dir).resolve())] = StoredRun(Path(out_dir), config, run_id)
    for run_dir in run_dirs:
        config = read_run_config(Path(run_dir))
        if config.get("release_manifest_sha256") != manifest_sha256:
            raise InputError(Path(run_dir) / CONFIG_NAME, "the run is of another release (its "
                             f"release_manifest_sha256 is not {manifest_sha256[:12]}…, A's manifest)")
        runs.setdefault(str(Path(run_dir).resolve()), StoredRun(Path(run_dir), config))
    return [runs[key] for key in sorted(runs)]


def run_predictions(store: Any, run: StoredRun) -> list[dict[str, Any]]:
    """The run's prediction lines: the store's Prediction rows of its EvalRun (the run's predictions, replaced whole
    at each finish), else its folder's predictions.jsonl (a run folder named with --run that the store lacks)."""
    from cftools.evaluate.predictions import read_predictions
    from cftools.evaluate.run import PREDICTIONS_NAME

    if store is not None and run.run_id is not None:
        return stored_lines(store, run.run_id)
    path = run.out_dir / PREDICTIONS_NAME
    if not path.is_file():
        raise CftoolsError(f"{path}: missing, and the store holds no predictions of this run")
    return list(read_predictions(path, truncate=False).values())


def stored_lines(store: Any, run_id: int) -> list[dict[str, Any]]:
    """A run's Prediction rows as the lines they were stored from (`predictions.prediction_row`), with what rescoring
    needs only: the database reads the JSON `scores` (whether there are option scores, the kind), so a ranking
    run's option scores are never parsed here. A row without `correct` is a judged answer."""
    from sqlalchemy import select

    from cftools.models import Prediction

    ranked = Prediction.scores["options"].as_string().is_not(None)
    query = select(Prediction.item_key, Prediction.which, Prediction.correct, Prediction.parsed, Prediction.raw,
                   ranked, Prediction.scores["kind"].as_string()).where(Prediction.run_id == run_id)
    with store.session() as session:
        rows = session.execute(query).all()
    lines = []
    for item, which, correct, parsed, raw, has_scores, kind in rows:
        line = {"id": item, "which": which, "correct": correct, "parsed": parsed, "raw": raw,
                "scores": [] if has_scores else None, "kind": kind}
        if correct is None:
            line["similarities"] = None
        lines.append(line)
    return lines


# -- B's questions, as each run would ask them ---------------------------------------------------------------------

def question_settings(config: dict[str, Any]) -> tuple:
    """What of a run's configuration decides which questions it asks of a record and their gold."""
    from cftools.evaluate.answerers import parse_model_spec
    from cftools.evaluate.run import MODES, PLAIN

    try:
        needs_image = parse_model_spec(str(config.get("model"))).needs_image
    except CftoolsError:  # an imported run's model name: it was asked with the images
        needs_image = True
    mode = config.get("mode")
    return (mode if mode in MODES else None, needs_image, config.get("template"), config.get("max_new_tokens") or 16,
            config.get("prompt") or PLAIN, bool(config.get("swap_options")),
            json.dumps(config.get("kind_options") or {}, sort_keys=True))


class BQuestions:
    """B's questions of its added and relabelled items, built once per distinct run setting."""

    def __init__(self, diff: ReleaseDiff, workspace_root: Optional[Path] = None) -> None:
        self.diff = diff
        self.root = workspace_root
        self.records = [diff.b.records[c.id] for c in diff.items if c.category in (ADDED, RELABELLED)]
        self.cache: dict[tuple, dict[str, dict[tuple[str, str], Any]]] = {}

    def templates(self, template: Optional[str]) -> Any:
        from cftools.evaluate.questions import PromptTemplates

        try:
            return PromptTemplates(template, self.root)
        except Exception:  # noqa: BLE001 (a run's own template file moved: the gold and options do not depend on it)
            return PromptTemplates(None, self.root)

    def of(self, settings: tuple) -> dict[str, dict[tuple[str, str], Any]]:
        """mode -> (id, which) -> Question, for the settings' mode (both modes for a run that mixed them)."""
        if settings not in self.cache:
            from cftools.evaluate.questions import Wording, build_questions

            mode, needs_image, template, max_new_tokens, variant, swap, options = settings
            templates = self.templates(template)
            wording = Wording(max_new_tokens=max_new_tokens, prompt_variant=variant, swap_options=swap,
                              options=json.loads(options))
            built = {}
            for one in ([mode] if mode else ["rank", "generate"]):
                questions, _ = build_questions(self.diff.b.path, self.records, templates, one, needs_image,
                                               wording=wording)
                built[one] = {q.key: q for q in questions}
            self.cache[settings] = built
        return self.cache[settings]


def rescored(line: dict[str, Any], question: Any, reading: str) -> Optional[bool]:
    """A stored answer judged against B's question, as the run judged it against A's (None: nothing to rescore)."""
    from cftools.evaluate.run import generated_line, rank_correct

    if line.get("scores") is not None:
        return rank_correct(question, line.get("parsed"))
    if line.get("raw") is None:
        return None
    return bool(generated_line(question, line["raw"], reading)["correct"])


# -- tracing ------------------------------------------------------------------------------------------------------

def trace_run(run: StoredRun, lines: list[dict[str, Any]], diff: ReleaseDiff, category: dict[str, str],
              b_questions: BQuestions) -> RunChange:
    """One run of A rescored on B along the path of the module's docstring."""
    from cftools.evaluate.predictions import STRICT

    config = run.config
    reading = config.get("reading") or STRICT
    built = b_questions.of(question_settings(config))
    modes = list(built)
    changes: dict[tuple[str, str], QuestionChange] = {}
    answered: set[tuple[str, str]] = set()
    not_in_a = judged = not_rescorable = dropped = 0

    def change_of(kind: str, which: str) -> QuestionChange:
        found = changes.get((kind, which))
        if found is None:
            found = changes[(kind, which)] = QuestionChange(kind, which)
        return found

    for line in lines:
        item, which = str(line["id"]), str(line["which"])
        if "similarities" in line:
            judged += 1
            continue
        where = category.get(item)
        if where is None or where == ADDED:
            not_in_a += 1
            continue
        kind = str(line.get("kind") or diff.a.records[item]["kind"])
        tallies = change_of(kind, which).tallies
        correct = bool(line.get("correct"))
        tallies["a"].add(correct)
        if where == REMOVED:
            continue
        tallies["removed"].add(correct)
        if where in STALE:
            continue
        tallies["stale"].add(correct)
        if where != RELABELLED:
            tallies["b"].add(correct)
            continue
        mode = "rank" if line.get("scores") is not None and "rank" in built else modes[-1]
        question = built[mode].get((item, which))
        if question is None:
            dropped += 1
            continue
        answered.add((item, which))
        again = rescored(line, question, reading)
        if again is None:
            not_rescorable += 1
            continue
        tallies["b"].add(again)
    for (item, which), question in built[modes[-1]].items():  # B's questions with no comparable prediction
        if not question.judged and (item, which) not in answered:
            change_of(question.kind, which).unscored += 1
    notes = []
    if not_in_a:
        notes.append(f"{not_in_a} predictions are of items A does not hold (left out)")
    if judged:
        notes.append(f"{judged} judged answers (scored by a judge against references) are not rescored")
    stale = sum(q.tallies["removed"].n - q.tallies["stale"].n for q in changes.values())
    if stale:
        notes.append(f"{stale} answers are about items with new images or a reworded question: the model saw "
                     "something else, so they are not comparable and left out of B's score")
    if dropped:
        notes.append(f"{dropped} answers are to questions B no longer asks of a relabelled item (dropped)")
    if not_rescorable:
        notes.append(f"{not_rescorable} answers of relabelled items have no stored reply to rescore (dropped)")
    questions = [changes[key] for key in sorted(changes)]
    for question in questions:
        question.parts()  # checks that the parts add up
    return RunChange(run=str(run.out_dir), model=str(config.get("model")), mode=str(config.get("mode")),
                     questions=questions, notes=notes)


def score_changes(diff: ReleaseDiff, store: Any = None, run_dirs: Iterable[Path] = (),
                  workspace_root: Optional[Path] = None) -> list[RunChange]:
    """Every stored run of A (the store's, and RUN_DIRS) rescored on B."""
    runs = stored_runs(store, diff.a.manifest_sha256, run_dirs)
    category = diff.category_of()
    b_questions = BQuestions(diff, workspace_root)
    return [trace_run(run, run_predictions(store, run), diff, category, b_questions) for run in runs]


# -- Markdown -----------------------------------------------------------------------------------------------------

def points(value: Optional[float], signed: bool = False) -> str:
    if value is None:
        return "–"
    return f"{100 * value:+.1f}" if signed else f"{100 * value:.1f}"


def score_changes_markdown(diff: ReleaseDiff, runs: list[RunChange], heading: str = "##") -> str:
    lines = [f"{heading} Score changes of the stored runs of {diff.a.label}", ""]
    if not runs:
        return "\n".join(lines + [f"No stored run of {diff.a.label} (runs are matched by its manifest's SHA-256)."]) \
            + "\n"
    lines += ["Each run's stored predictions rescored on B without asking the model again. Accuracy in %; the parts "
              "are percentage points and add up to the change on the comparable items: removed (items B dropped), "
              "stale (items with new images or a reworded question: not comparable), relabelled (rescored against "
              "B's answers). Unscored: B's questions with no comparable prediction (added items, new questions); "
              "'B within' is B's score on all its questions were they all wrong or all right.", ""]
    for run in runs:
        # as eval's reports name them (a report to share): a local model folder and the run folder by their names
        lines += [f"{heading}# {public_spec(run.model)} ({run.mode}): `{Path(run.run).name}`", "",
                  "| kind | question | A | removed | stale | relabelled | B comparable | change | unscored | "
                  "B within |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for question in run.questions:
            d = question.as_dict()
            within = d["b_with_unscored"]
            lines.append(f"| {question.kind} | {question.which} | {points(d['a']['value'])} (n {d['a']['n']}) | "
                         + " | ".join(points(d["parts"][p], signed=True) for p in PARTS)
                         + f" | {points(d['b']['value'])} (n {d['b']['n']}) | {points(d['change'], signed=True)} | "
                         f"{question.unscored} | "
                         + (f"{points(within[0])}–{points(within[1])}" if within else "–") + " |")
        lines += [""] + [f"- {note}" for note in run.notes] + ([""] if run.notes else [])
    return "\n".join(lines).rstrip("\n") + "\n"

