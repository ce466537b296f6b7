"""`cftools preflight RELEASE`: what a release can show, per kind and per group, and the reviewer's checks.

Per kind and per group (the C-VQA question type, the CFMM type, the MuCR category):

- **n**: items, the questions a model is asked about them (as `cftools eval` asks them: C-VQA and CFMM the original
  and the counterfactual question, MuCR C2E, E2C and Cue; judged questions such as MuCR Exp have no accuracy and
  are left out) and distinct images.
- **MDD**, the minimum detectable difference: the smallest accuracy difference between two models that the
  clustered paired test detects with 80% power at α = 0.05, two-sided (`cftools.evaluate.paired`: Connor 1987 with
  the design effect of Durkalski et al. 2003's clustered McNemar statistic; the formula is written there). The
  release gives n and the images (m_w = Σ m² / Σ m questions per image); the discordance ψ and the intra-image
  correlation ρ come from a stored pair of runs of this release when there is one, else from ASSUMPTIONS: two
  models of base accuracy p ∈ {0.5, 0.6, 0.7} whose errors are independent given the question (ψ = 2p(1 − p): real
  models err together more often, so ψ is smaller and the real MDD smaller) and ρ = ASSUMED_RHO. The largest MDD
  over those p is the one reported; the range is given.
- **Human ceiling** (`human_ceiling`): the share of individual first-round (verification) judgments that agree
  with the released answer, with its 95% Wilson interval (scipy). From the store's judgments when the release's
  items are in this workspace's store: a judgment agrees when it finds the question about the image and either
  accepts the answer that was shown (and the item's answer was not changed after) or writes the released answer
  as its correction. Without a store, from the manifest's per-item annotation summary: an estimate (judgments that
  all agreed count as agreeing; of judgments that differed, all but one). `human_ceiling` is the extension point for
  control items: their accuracy joins as its own figure (CONTROL_SOURCE) when a control record exists.
- **Blind floor**: the accuracy of a stored text-only run (`--model blind...`) on the scope's questions, and the
  share of its items answered right without the image (every question of the item right); **chance**: the mean over
  the scope's questions of 1/(number of answers to choose from): the options shown (CFMM: 2, the paper's 50%;
  MuCR C2E/E2C/Cue: 4, the paper's 25%), 1/2 for a yes/no question, 1/21 for a count (the answer space 0–20 that
  rank mode offers: no paper defines a chance level for C-VQA's counts), none for other free answers.

The reviewer's checks are in `cftools.release.review`; `cftools.release.preflight_check` runs both on a release
folder with its stored runs.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from cftools.evaluate.paired import (ALPHA, POWER, Paired, cluster_sums, minimum_detectable_difference,
                                     observed_design, weighted_cluster_size)

ALL_GROUPS = "(all)"
ASSUMED_ACCURACIES = (0.5, 0.6, 0.7)
ASSUMED_RHO = 0.2  # a stated assumption: how alike two questions of one image are in which model gets them right
CONFIDENCE = 0.95
COUNT_ANSWERS = 21  # "0".."20": the answer space rank mode offers a count question (cftools.evaluate.questions)
STORE_SOURCE = "store: first-round judgments"
MANIFEST_SOURCE = "manifest: per-item annotation summary (an estimate)"
CONTROL_SOURCE = "control items"


@dataclass
class Unit:
    """One question of the release, as `cftools eval` asks it."""

    item: str
    which: str
    kind: str
    group: str
    image: str
    chance: Optional[float]


@dataclass
class Scope:
    kind: str
    group: str
    items: int = 0
    questions: int = 0
    images: int = 0
    m_w: float = 1.0
    chance: Optional[float] = None
    mdd: Optional[float] = None
    mdd_range: Optional[tuple[Optional[float], Optional[float]]] = None
    design: dict[str, Any] = field(default_factory=dict)  # psi, rho and where they come from
    ceiling: Optional[dict[str, Any]] = None
    controls: Optional[dict[str, Any]] = None
    blind: Optional[dict[str, Any]] = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


# -- the questions ---------------------------------------------------------------------------------------------

def chance_of(question: Any) -> Optional[float]:
    """1/(answers to choose from) of one question (see the module docstring); None for a free answer."""
    from cftools.answers import CHOICE

    if question.options:
        return 1.0 / len(question.options)
    if question.answer_type == CHOICE and question.choices:
        return 1.0 / len(question.choices)
    if question.answer_type == "yes/no":
        return 0.5
    if question.answer_type == "number":
        return 1.0 / COUNT_ANSWERS
    return None


class QuestionShapes:
    """Stands in for the eval prompt templates (`cftools.evaluate.questions.PromptTemplates`): the figures need which
    questions a model is asked and their answers to choose from, not the prompts' text, whose rendering would be most
    of an export's time here."""

    def question(self, **_: Any) -> str:
        return ""

    def named(self, _: str) -> "QuestionShapes":
        return self

    def render(self, **_: Any) -> str:
        return ""


def release_units(release_dir: Path, records: Sequence[dict[str, Any]]) -> list[Unit]:
    """Every question `cftools eval` asks of the release's records (generate mode, judged questions left out);
    a record whose questions cannot be built (a missing image file: the `images` check names it) is left out."""
    from cftools.errors import CftoolsError
    from cftools.evaluate.compare import image_of
    from cftools.evaluate.questions import build_questions

    templates = QuestionShapes()
    images = {str(r.get("id")): image_of(r) for r in records if "id" in r}

    def build(chosen: Sequence[dict[str, Any]]) -> list[Any]:
        return build_questions(release_dir, chosen, templates, "generate", needs_image=False)[0]

    try:
        questions = build(records)
    except CftoolsError:
        questions = []
        for record in records:
            try:
                questions += build([record])
            except CftoolsError:
                continue
    return [Unit(q.item_id, q.which, q.kind, q.group or "-", images.get(q.item_id, f"item:{q.item_id}"), chance_of(q))
            for q in questions if not q.judged]


def scope_keys(unit_kind: str, unit_group: str) -> tuple[tuple[str, str], tuple[str, str]]:
    return (unit_kind, ALL_GROUPS), (unit_kind, unit_group)


def by_scope(units: Iterable[Unit]) -> dict[tuple[str, str], list[Unit]]:
    scopes: dict[tuple[str, str], list[Unit]] = defaultdict(list)
    for unit in units:
        for key in scope_keys(unit.kind, unit.group):
            scopes[key].append(unit)
    return dict(sorted(scopes.items(), key=lambda kv: (kv[0][0], kv[0][1] != ALL_GROUPS, kv[0][1])))


# -- power --------------------------------------------------------------------------------------------------------

def assumed_mdd(n: int, m_w: float) -> tuple[Optional[float], tuple[Optional[float], Optional[float]]]:
    """(the largest MDD over ASSUMED_ACCURACIES, (smallest, largest)) under the stated assumptions."""
    values = [minimum_detectable_difference(n, 2 * p * (1 - p), ASSUMED_RHO, m_w) for p in ASSUMED_ACCURACIES]
    known = [v for v in values if v is not None]
    if not known:
        return None, (None, None)
    worst = None if len(known) < len(values) else max(known)
    return worst, (min(known), max(known))


def pair_of(units: Sequence[Unit], run_a: Any, run_b: Any) -> Optional[Paired]:
    """The scope's questions both runs answered, as a Paired; None when none."""
    def correct(run: Any) -> dict[tuple[str, str], bool]:
        return {(str(p["id"]), str(p["which"])): bool(p["correct"]) for p in run.predictions
                if p.get("correct") is not None}

    left, right = correct(run_a), correct(run_b)
    keys = [(u.item, u.which, u.image) for u in units if (u.item, u.which) in left and (u.item, u.which) in right]
    if not keys:
        return None
    return Paired.of([left[k[:2]] for k in keys], [right[k[:2]] for k in keys], [k[2] for k in keys])


def scope_power(scope: Scope, units: Sequence[Unit], pair: Optional[tuple[Any, Any]]) -> None:
    """Fill SCOPE's MDD: from the pair of runs' ψ and ρ when it answered the scope's questions, else assumed."""
    observed = pair_of(units, *pair) if pair else None
    if observed is not None and observed.n >= 2:
        design = observed_design(observed)
        scope.mdd = minimum_detectable_difference(scope.questions, design["psi"], design["rho"], scope.m_w)
        scope.design = {"source": "runs", "psi": design["psi"], "rho": design["rho"], "paired_questions": observed.n}
        return
    scope.mdd, scope.mdd_range = assumed_mdd(scope.questions, scope.m_w)
    scope.design = {"source": "assumed", "accuracies": list(ASSUMED_ACCURACIES), "rho": ASSUMED_RHO,
                    "psi": [2 * p * (1 - p) for p in ASSUMED_ACCURACIES]}


@dataclass(frozen=True)
class CurvePoint:
    """One point of a scope's MDD curve: ITEMS items, asked QUESTIONS questions, detect MDD."""

    items: int
    questions: int
    mdd: float


CURVE_POINTS = 40


def scope_mdd_at(scope: Scope, questions: int) -> Optional[float]:
    """The MDD of SCOPE's design over QUESTIONS questions: the same ψ, ρ and m_w as the scope's own MDD (a pair of
    runs' or the assumed ones), so the curve passes through the scope's own point."""
    if scope.design.get("source") == "runs":
        return minimum_detectable_difference(questions, scope.design["psi"], scope.design["rho"], scope.m_w)
    return assumed_mdd(questions, scope.m_w)[0]


def mdd_curve(scope: Scope, points: int = CURVE_POINTS) -> list[CurvePoint]:
    """The MDD against the number of items, from a tenth to ten times the scope's own items (its own among them),
    each item asked as many questions as the scope's items are on average; sizes where no difference is detectable
    are left out."""
    import numpy as np

    if scope.items <= 0:
        return []
    per_item = scope.questions / scope.items
    sizes = np.geomspace(max(1, scope.items // 10), max(10 * scope.items, 100), points)
    curve = []
    for items in sorted({int(round(x)) for x in sizes} | {scope.items}):
        questions = scope.questions if items == scope.items else max(1, int(round(items * per_item)))
        mdd = scope_mdd_at(scope, questions)
        if mdd is not None:
            curve.append(CurvePoint(items, questions, mdd))
    return curve


def headroom(scope: Scope) -> Optional[tuple[float, str]]:
    """(human ceiling − floor, what the floor is): the blind floor when a text-only run is stored, else chance; None
    without a human ceiling or a floor."""
    ceiling = (scope.ceiling or {}).get("value")
    blind = (scope.blind or {}).get("accuracy")
    floor, name = (blind, "blind floor") if blind is not None else (scope.chance, "chance")
    if ceiling is None or floor is None:
        return None
    return ceiling - floor, name


# -- the human ceiling ---------------------------------------------------------------------------------------------

def wilson(agree: int, total: int) -> dict[str, Any]:
    """AGREE of TOTAL with its Wilson interval (`cftools.annotate.quality.wilson_interval`)."""
    from cftools.annotate.quality import wilson_interval

    interval = wilson_interval(agree, total, CONFIDENCE)
    if interval is None:
        return {"agree": 0, "total": 0, "value": None, "low": None, "high": None}
    return {"agree": agree, "total": total, "value": interval.estimate, "low": interval.low, "high": interval.high}


def same_answer(a: Any, b: Any) -> bool:
    from cftools.answers import normalize_answer

    return a is not None and b is not None and normalize_answer(str(a)) == normalize_answer(str(b))


def store_judgments(store: Any, records: Sequence[dict[str, Any]],
                    provenance: dict[str, dict[str, Any]]) -> Optional[dict[str, list[bool]]]:
    """Item id -> whether each of its first-round judgments agrees with the released answer; None when the store
    holds no verification judgment of these items."""
    from sqlalchemy import select

    from cftools.annotate.projects import GONE
    from cftools.judgments import VERIFY
    from cftools.models import AnnotationTask, Item, Judgment
    from cftools.store import in_chunks

    released = {str(r["id"]): r for r in records}
    found: dict[str, list[bool]] = defaultdict(list)
    with store.session() as session:
        for part in in_chunks(sorted(released)):
            rows = session.execute(
                select(Item.key, Judgment.related, Judgment.answer_correct, Judgment.corrected_answer)
                .join(AnnotationTask, AnnotationTask.id == Judgment.task_id)
                .join(Item, Item.id == AnnotationTask.item_id)
                .where(AnnotationTask.purpose == VERIFY, AnnotationTask.state.not_in(GONE), Item.key.in_(part)))
            for key, related, correct, corrected in rows:
                if correct is None and related is None:
                    continue
                changed = (provenance.get(key) or {}).get("corrected_from") is not None
                agrees = related is not False and (
                    (correct is True and not changed) or same_answer(corrected, released[key].get("answer")))
                found[key].append(bool(agrees))
    return dict(found) or None


def manifest_judgments(provenance: dict[str, dict[str, Any]]) -> dict[str, list[bool]]:
    """The estimate from the manifest's annotation summaries (see the module docstring)."""
    found = {}
    for key, prov in provenance.items():
        summary = (prov or {}).get("annotation") or {}
        count = int(summary.get("judgments") or 0)
        if count == 0 or summary.get("agreed") is None:
            continue
        agreeing = count if summary["agreed"] else count - 1
        found[key] = [True] * agreeing + [False] * (count - agreeing)
    return found


def control_judgments(store: Any, records: Sequence[dict[str, Any]]) -> Optional[dict[str, list[bool]]]:
    """Scope key (`control_scope`) -> whether each scored answer to a control item of that kind and group was right
    (`annotate pull`'s control outcomes); None when the store holds none of the released kinds'."""
    from sqlalchemy import select

    from cftools.judgments import CONTROL
    from cftools.models import Item, TaskOutcome

    kinds = sorted({str(r.get("kind")) for r in records if r.get("kind")})
    found: dict[str, list[bool]] = defaultdict(list)
    with store.session() as session:
        rows = session.execute(
            select(Item.kind, Item.group, TaskOutcome.correct).join(Item, Item.id == TaskOutcome.item_id)
            .where(TaskOutcome.role == CONTROL, TaskOutcome.correct.is_not(None), Item.kind.in_(kinds)))
        for kind, group, correct in rows:
            for scope in scope_keys(kind, group or "-"):
                found[control_scope(*scope)].append(bool(correct))
    return dict(found) or None


def control_scope(kind: str, group: str) -> str:
    return f"{kind}\t{group}"


def human_ceiling(records: Sequence[dict[str, Any]], provenance: dict[str, dict[str, Any]], store: Any = None
                  ) -> tuple[str, Optional[dict[str, list[bool]]], Optional[dict[str, list[bool]]]]:
    """(where the figures come from, item -> agreement of its first-round judgments, item -> control answers).

    The extension point of the human ceiling: the adjudicated record (the store's judgments, else the manifest's
    summaries) and the control items' accuracy (`control_judgments`), each reported with its Wilson interval."""
    judged = store_judgments(store, records, provenance) if store is not None else None
    source = STORE_SOURCE
    if judged is None:
        judged, source = manifest_judgments(provenance) or None, MANIFEST_SOURCE
    controls = control_judgments(store, records) if store is not None else None
    return source, judged, controls


def ceiling_of(items: Iterable[str], judged: Optional[dict[str, list[bool]]], source: str) -> Optional[dict]:
    if not judged:
        return None
    votes = [vote for item in items for vote in judged.get(item, [])]
    return {**wilson(sum(votes), len(votes)), "source": source} if votes else None


# -- the blind floor -----------------------------------------------------------------------------------------------

def blind_of(units: Sequence[Unit], run: Any) -> Optional[dict[str, Any]]:
    """A text-only run's accuracy on the scope's questions and the share of its items answered right."""
    answered = {(str(p["id"]), str(p["which"])): bool(p["correct"]) for p in run.predictions
                if p.get("correct") is not None}
    mine = [(u.item, answered[(u.item, u.which)]) for u in units if (u.item, u.which) in answered]
    if not mine:
        return None
    per_item: dict[str, list[bool]] = defaultdict(list)
    for item, right in mine:
        per_item[item].append(right)
    return {"accuracy": sum(r for _, r in mine) / len(mine), "questions": len(mine),
            "items_right": sum(all(v) for v in per_item.values()), "items": len(per_item),
            "share_items_right": sum(all(v) for v in per_item.values()) / len(per_item),
            "model": run.config.get("model"), "run": str(run.out_dir)}


# -- runs of the release -------------------------------------------------------------------------------------------

def is_blind(run: Any) -> bool:
    from cftools.evaluate.answerers import parse_model_spec

    try:
        return parse_model_spec(str(run.config.get("model"))).kind == "blind"
    except Exception:  # noqa: BLE001 - an imported or unknown model spec is not a blind run
        return False


# -- the report ----------------------------------------------------------------------------------------------------

@dataclass
class PreflightReport:
    release: str
    name: str
    version: str
    scopes: list[Scope]
    ceiling_source: Optional[str]
    pair: Optional[list[str]] = None  # the two runs' folders the MDD's ψ and ρ come from
    blind_run: Optional[str] = None
    checks: list[Any] = field(default_factory=list)  # cftools.release.review.Check
    plot: Optional[str] = None  # where `cftools preflight` drew the MDD against the number of items

    @property
    def failed(self) -> list[Any]:
        return [c for c in self.checks if c.status == "fail"]

    def as_dict(self) -> dict[str, Any]:
        return {"release": self.release, "name": self.name, "version": self.version, "alpha": ALPHA, "power": POWER,
                "assumptions": {"accuracies": list(ASSUMED_ACCURACIES), "rho": ASSUMED_RHO,
                                "psi": "2p(1-p): independent errors"},
                "ceiling_source": self.ceiling_source, "pair": self.pair, "blind_run": self.blind_run,
                "scopes": [s.as_dict() for s in self.scopes], "checks": [c.as_dict() for c in self.checks],
                "plot": self.plot, "ok": not self.failed}


def preflight_figures(release_dir: Path, records: Sequence[dict[str, Any]], provenance: dict[str, dict[str, Any]],
                      store: Any = None, runs: Sequence[Any] = (), name: str = "", version: str = ""
                      ) -> PreflightReport:
    """The per-scope figures of a release (records and provenance given: at export time the manifest is not
    written yet); RUNS are its stored eval runs, newest first."""
    units = release_units(Path(release_dir), records)
    sighted = [run for run in runs if not is_blind(run)]
    pair = (sighted[0], sighted[1]) if len(sighted) >= 2 else None
    blind = next((run for run in runs if is_blind(run)), None)
    source, judged, controls = human_ceiling(records, provenance, store)
    scopes = []
    for (kind, group), mine in by_scope(units).items():
        items = sorted({u.item for u in mine})
        _, sizes = cluster_sums_of(mine)
        chances = [u.chance for u in mine if u.chance is not None]
        scope = Scope(kind, group, items=len(items), questions=len(mine), images=len(sizes),
                      m_w=weighted_cluster_size(sizes),
                      chance=sum(chances) / len(chances) if chances else None)
        scope_power(scope, mine, pair)
        scope.ceiling = ceiling_of(items, judged, source)
        scope.controls = ceiling_of([control_scope(kind, group)], controls, CONTROL_SOURCE)
        scope.blind = blind_of(mine, blind) if blind is not None else None
        scopes.append(scope)
    return PreflightReport(str(release_dir), name, version, scopes, source if judged else None,
                           [str(pair[0].out_dir), str(pair[1].out_dir)] if pair else None,
                           str(blind.out_dir) if blind is not None else None)


def cluster_sums_of(units: Sequence[Unit]) -> tuple[Any, list[float]]:
    import numpy as np

    _, index = np.unique(np.asarray([u.image for u in units], dtype=object), return_inverse=True)
    sums, sizes = cluster_sums(np.zeros(len(units)), np.asarray(index, dtype=np.int64))
    return sums, [float(s) for s in sizes]


def release_provenance(release_dir: Path) -> dict[str, dict[str, Any]]:
    from cftools.release.layout import load_manifest

    provenance = load_manifest(release_dir).get("provenance") or {}
    return {str(k): v for k, v in provenance.items() if isinstance(v, dict)}


# -- Markdown ------------------------------------------------------------------------------------------------------

def cell(text: str) -> str:
    """A name from the data as one Markdown table cell (a group may hold a pipe or a line break)."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def pts(value: Optional[float]) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def interval(figure: Optional[dict[str, Any]]) -> str:
    if not figure or figure.get("value") is None:
        return "–"
    return f"{pts(figure['value'])} [{pts(figure['low'])}, {pts(figure['high'])}] (n={figure['total']})"


def mdd_cell(scope: Scope) -> str:
    if scope.design.get("source") == "runs":
        return pts(scope.mdd) if scope.mdd is not None else "not detectable"
    low, high = scope.mdd_range or (None, None)
    if low is None:
        return "not detectable"
    return f"{pts(scope.mdd) if scope.mdd is not None else '>' + pts(high)} ({pts(low)}–{pts(high)})"


def figures_markdown(report: PreflightReport, heading: str = "##") -> list[str]:
    """The per-scope table and how to read it (the data card's section, and the first part of `preflight`)."""
    runs = report.pair is not None
    lines = [f"{heading} What this release can show", "",
             "Per kind and group: items, the questions a model is asked about them and their images; **MDD**, the "
             f"smallest accuracy difference (points) between two models that a paired test clustered by image "
             f"detects with {POWER:.0%} power at α = {ALPHA} (two-sided); the **human ceiling** (the share of "
             "first-round human judgments that agree with the released answer, 95% Wilson interval); **chance**; and "
             "a text-only run's accuracy (**blind**) with the share of items it answers right without the image.", ""]
    if runs:
        lines += [f"MDD from the discordance ψ and intra-image correlation ρ of the runs `{Path(report.pair[0]).name}` "
                  f"and `{Path(report.pair[1]).name}` (Connor 1987 with the design effect of Durkalski et al. 2003's clustered "
                  "McNemar test).", ""]
    else:
        lines += ["No pair of runs of this release is stored, so the MDD rests on stated assumptions: two models of "
                  f"base accuracy {', '.join(f'{p:.1f}' for p in ASSUMED_ACCURACIES)} whose errors are independent "
                  f"(discordance ψ = 2p(1 − p)) and an intra-image correlation ρ = {ASSUMED_RHO}; shown is the "
                  "largest MDD over those accuracies, with the range (Connor 1987 with the design effect of "
                  "Durkalski et al. 2003's clustered McNemar test).", ""]
    lines += ["Chance: 1/(answers to choose from) per question: the options shown, 1/2 for yes/no, 1/21 for a count "
              "(the 0–20 answer space of rank mode; no paper defines one), none for other free answers. Human "
              f"ceiling from the {report.ceiling_source or 'annotation record: none in this release'}.", ""]
    header = "| kind | group | items | questions | images | MDD | human ceiling | chance | blind | right without image |"
    lines += [header, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in report.scopes:
        blind = s.blind or {}
        lines.append(f"| {cell(s.kind)} | {cell(s.group)} | {s.items} | {s.questions} | {s.images} | {mdd_cell(s)} | "
                     f"{interval(s.ceiling)} | {pts(s.chance)} | {pts(blind.get('accuracy'))} | "
                     f"{pts(blind.get('share_items_right'))} |")
    if any(s.controls for s in report.scopes):
        lines += ["", "Control items (people's accuracy on items with a known answer):", ""]
        lines += [f"- {s.kind} {s.group}: {interval(s.controls)}" for s in report.scopes if s.controls]
    if report.blind_run is None:
        lines += ["", "No text-only run of this release is stored (`cftools eval RELEASE --model blind`), so the blind "
                      "floor is not known."]
    return lines


def render_markdown(report: PreflightReport) -> str:
    lines = [f"# Preflight: {report.name} {report.version}".rstrip(), "", f"Release `{Path(report.release).name}`.", ""]
    lines += figures_markdown(report)
    lines += ["", "## Reviewer's checks", "", "| check | result | detail |", "|---|---|---|"]
    lines += [f"| {c.name} | {c.status} | {c.detail.replace('|', '/')} |" for c in report.checks]
    verdict = (f"**Failed**: {', '.join(c.name for c in report.failed)}." if report.failed
               else "Every check passed" + (" (with warnings)." if any(c.status == "warn" for c in report.checks)
                                            else "."))
    return "\n".join(lines + ["", verdict, ""])


def render_json(report: PreflightReport) -> str:
    return json.dumps(report.as_dict(), indent=2, ensure_ascii=False, sort_keys=True, default=str) + "\n"
