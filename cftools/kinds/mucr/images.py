"""Candidate images of MuCR pairs: for each pair with contextual descriptions and each style, N candidates of the
cause and N of the effect from an image backend (`cftools.imagegen`), stored by SHA-256 with their provenance.

An item's data gets, per style:

    candidates[style][k]      {"cause": "sha256:…", "effect": "sha256:…", "cause_provenance": {…}, "effect_…"}
    candidate_checks[style]   the candidates ranked best first, with their flags (blank_image, duplicate_candidate,
                              pair_inconsistent) and scores: what annotators see first; never a rejection
    image_failures            failed calls (API error, invalid base64, NaN image), with style and k

Image files are written first (content-addressed: a file already there is the same image), then the item and the
image rows in one transaction per pair and style; a killed run leaves nothing half-recorded, and a rerun makes
only the candidates still missing. Several `generate images` processes on one store share the work: each (pair,
style, round) is a job one of them claims (`cftools.generate.claims`). `regenerate_rejected` starts a new round, with new seeds, for the styles an
annotator marked "none usable" (`data.selection[style].none_usable`); the old round is kept under
`rejected_candidates`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import PIL.Image
from sqlalchemy import select

from cftools.distributed import as_completed, in_flight_of
from cftools.generate.claims import Claims, selection_start
from cftools.images import (GENERATED_IMAGES_FOLDER, StoreImageCache, read_image_file,
                            register_image, save_png)
from cftools.models import CHECKED, DRAFT, Image, Item, ItemEvent, utcnow
from cftools.store import Store

if TYPE_CHECKING:  # the image packages load only when a run draws
    from cftools.imagegen.base import PairSettings

KIND = "mucr"
IMAGES_FOLDER = GENERATED_IMAGES_FOLDER
GENERATOR = "mucr-images"  # the work claims' name for (pair, style, round) jobs
CLAIM_WAIT_S = 0.5


@dataclass
class ImagesReport:
    backend: str
    model: str
    pairs: int = 0
    styles: list[str] = field(default_factory=list)
    images_made: int = 0
    candidates_kept: int = 0  # already there from an earlier run
    failures: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    folder: str = ""

    @property
    def rate(self) -> float:
        return self.images_made / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "images_per_s": round(self.rate, 3)}


def context_descriptions(item: Item) -> Optional[tuple[str, str]]:
    context = (item.data or {}).get("context") or {}
    if context.get("cause_description") and context.get("effect_description"):
        return context["cause_description"], context["effect_description"]
    return None


def pairs_to_draw(store: Store, limit: Optional[int], groups: tuple[str, ...]) -> list[Item]:
    """Draft or checked pairs that have contextual descriptions, in id order."""
    with store.session() as session:
        query = select(Item).where(Item.kind == KIND, Item.status.in_([DRAFT, CHECKED])).order_by(Item.id)
        if groups:
            query = query.where(Item.group.in_(list(groups)))
        found = [i for i in session.execute(query).scalars() if context_descriptions(i)]
    return found[:limit] if limit is not None else found


def missing_candidates(data: dict[str, Any], style: str, per_prompt: int) -> list[int]:
    have = (data.get("candidates") or {}).get(style) or {}
    return [k for k in range(per_prompt) if str(k) not in have]


def round_of(data: dict[str, Any], style: str) -> int:
    return int((data.get("image_round") or {}).get(style, 0))


def start_new_round(data: dict[str, Any], style: str) -> dict[str, Any]:
    """DATA with STYLE's rejected candidates moved aside and the round counter advanced (new seeds)."""
    data = dict(data)
    rejected = dict(data.get("rejected_candidates") or {})
    rejected.setdefault(style, []).append((data.get("candidates") or {}).get(style) or {})
    data["rejected_candidates"] = rejected
    data["candidates"] = {k: v for k, v in (data.get("candidates") or {}).items() if k != style}
    data["candidate_checks"] = {k: v for k, v in (data.get("candidate_checks") or {}).items() if k != style}
    data["selection"] = {k: v for k, v in (data.get("selection") or {}).items() if k != style}
    data["image_round"] = {**(data.get("image_round") or {}), style: round_of(data, style) + 1}
    return data


def rank_candidates(candidates: dict[str, dict], paths: dict[str, Path], descriptions: tuple[str, str],
                    scorer: Any = None) -> list[dict[str, Any]]:
    """The automatic checks of one style's candidates, best first (for annotators' ranking only)."""
    from cftools.imagegen import check_candidates

    ks = sorted(int(k) for k in candidates)
    causes = [PIL.Image.open(paths[candidates[str(k)]["cause"]]).convert("RGB") for k in ks]
    effects = [PIL.Image.open(paths[candidates[str(k)]["effect"]]).convert("RGB") for k in ks]
    reports = check_candidates(causes, effects, ks=ks, cause_text=descriptions[0], effect_text=descriptions[1],
                               scorer=scorer)
    return [{"k": r.k, "score": r.score, "clip_cause": r.clip_cause, "clip_effect": r.clip_effect,
             "flags": [{"code": f.code, "reason": f.reason, "side": f.side} for f in r.flags]} for r in reports]


@dataclass(frozen=True)
class ImagesOptions:
    """What one `generate images` run draws: the styles, how each pair's candidates are drawn, and which pairs."""

    styles: tuple[Any, ...]
    draw: PairSettings  # draw.n is the candidates per prompt
    limit: Optional[int] = None
    groups: tuple[str, ...] = ()
    regenerate_rejected: bool = False


@dataclass(frozen=True)
class DrawRun:
    """Where a run's candidates go and how they are ranked: what storing each pair's candidates needs."""

    store: Store
    folder: Path
    seed: int
    scorer: Any
    report: ImagesReport


def record_style(run: DrawRun, item_id: int, style: str, results: list,
                 finish: Callable[[Any, bool], None] = lambda session, ok: None) -> None:
    """Store one pair's new candidates of STYLE (files first, then one transaction) and re-rank the style;
    FINISH(session, ok) closes the job's claim in that transaction."""
    new: dict[str, dict] = {}
    files: list[Path] = []
    made: list[Path] = []  # files this call created: no row points to them until the transaction below commits
    try:
        for result in results:
            if not result.ok:
                run.report.failures.append({"item_id": item_id, "style": style, **result.as_dict()})
                continue
            cause, effect = save_png(result.cause, run.folder, made), save_png(result.effect, run.folder, made)
            files += [cause, effect]
            new[str(result.k)] = {"cause": f"sha256:{cause.stem}", "effect": f"sha256:{effect.stem}",
                                  "cause_provenance": result.cause_provenance.as_dict(),
                                  "effect_provenance": result.effect_provenance.as_dict()}
            run.report.images_made += 2
        _store_style(run, item_id, style, files, new, finish)
    except BaseException:
        for path in made:  # a full disk (or a kill of the transaction): no image file without its row
            path.unlink(missing_ok=True)
        raise


def _store_style(run: DrawRun, item_id: int, style: str, files: list[Path], new: dict[str, dict],
                 finish: Callable[[Any, bool], None]) -> None:
    store = run.store
    measured = [read_image_file(path) for path in files]
    failures = [f for f in run.report.failures if f["item_id"] == item_id and f["style"] == style]
    with store.write() as session:
        for image in measured:
            register_image(store, session, image)
        item = session.get(Item, item_id)
        data = dict(item.data or {})
        candidates = {**((data.get("candidates") or {}).get(style) or {}), **new}
        data["candidates"] = {**(data.get("candidates") or {}), style: candidates}
        # a candidate made now is no longer a failure: earlier failures of it go (a retry that worked)
        earlier = [f for f in data.get("image_failures") or [] if (f.get("style"), str(f.get("k"))) not in
                   {(style, k) for k in new}]
        data["image_failures"] = [*earlier, *failures]
        if not data["image_failures"]:
            del data["image_failures"]
        session.flush()
        fresh = {f"sha256:{img.sha256}": img.path for img in measured}
        known = {ref for c in candidates.values() for ref in (c["cause"], c["effect"])}
        data["candidate_checks"] = {**(data.get("candidate_checks") or {}),
                                    style: rank_candidates(candidates, _paths(session, known, fresh),
                                                           context_descriptions(item), run.scorer)}
        item.data = data
        item.updated_at = utcnow()
        session.add(item)
        session.add(ItemEvent(item_id=item_id, stage="generate images", from_status=item.status,
                              to_status=item.status, detail={"style": style, "new": sorted(new, key=int),
                                                             "failed": len(failures), "seed": run.seed}))
        finish(session, not failures)


def _paths(session: Any, refs: set[str], fresh: dict[str, Path]) -> dict[str, Path]:
    shas = [r.removeprefix("sha256:") for r in refs]
    rows = session.execute(select(Image.sha256, Image.path).where(Image.sha256.in_(shas))).all()
    return {**{f"sha256:{sha}": Path(path) for sha, path in rows}, **fresh}


def generate_images(store: Store, workspace_root: Path, backend: Any, *, options: ImagesOptions, scorer: Any = None,
                    progress: Optional[Callable[[int, int, int], None]] = None) -> ImagesReport:
    """Make the missing candidates of up to options.limit pairs in every style; returns what happened."""
    styles, per_prompt = options.styles, options.draw.n
    report = ImagesReport(backend=backend.name, model=backend.model, styles=[s.name for s in styles],
                          folder=str(Path(workspace_root) / IMAGES_FOLDER))
    folder = Path(workspace_root) / IMAGES_FOLDER
    if hasattr(backend, "request_cache"):
        backend.request_cache = StoreImageCache(store, folder)
    selected_at = selection_start(store)
    items = pairs_to_draw(store, options.limit, options.groups)
    report.pairs = len(items)
    started = time.perf_counter()
    todo = []
    for item in items:
        data = dict(item.data or {})
        for style in styles:
            rejected = ((data.get("selection") or {}).get(style.name) or {}).get("none_usable")
            if options.regenerate_rejected and rejected:
                data = start_new_round(data, style.name)
                with store.write() as session:
                    stored = session.get(Item, item.id)
                    stored.data, stored.updated_at = data, utcnow()
                    session.add(stored)
            missing = missing_candidates(data, style.name, per_prompt)
            report.candidates_kept += per_prompt - len(missing)
            if missing:
                todo.append((item, style, missing, round_of(data, style.name)))
    total = sum(len(m) for _, _, m, _ in todo) * 2
    # other `generate images` processes on the store share the jobs: each (pair, style, round) is drawn once
    jobs = {f"{item.key}:{style.name}:{round_}": (item, style, missing, round_) for item, style, missing, round_ in todo}
    claims = Claims(store, GENERATOR, list(jobs), selected_at=selected_at)
    run = DrawRun(store, folder, options.draw.seed, scorer, report)
    if progress:  # the first pair's images can take a while: the count shows from the start
        progress(0, total, 0)

    def draw(job: str) -> list:
        item, style, missing, round_ = jobs[job]
        cause, effect = context_descriptions(item)
        key = item.key if round_ == 0 else f"{item.key}#round{round_}"
        return backend.generate_pair(cause, effect, style=style, generator_key=key,
                                     settings=replace(options.draw, candidates=tuple(missing)))

    # a backend on a Ray cluster (`--ray`) draws as many jobs at once as it has workers; this process writes each
    in_flight = in_flight_of(backend)  # grows as nodes join the cluster
    try:
        for keys in claims.batches(in_flight):
            if keys is None:  # the rest is held by other workers: wait for them to finish or die
                time.sleep(CLAIM_WAIT_S)
                continue
            for job, results in as_completed(keys, draw, in_flight):
                item = jobs[job][0]
                style = jobs[job][1]
                record_style(run, item.id, style.name, results,
                             finish=lambda session, ok, job=job: claims.finish(session, [job], ok))
                report.seconds = time.perf_counter() - started
                if progress:
                    progress(report.images_made, total, len(report.failures))
    finally:
        claims.close()
    report.seconds = time.perf_counter() - started
    return report
