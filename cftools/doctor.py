"""`cftools doctor`: what a crash, a kill or a hand edit can leave wrong in a workspace, and the safe repairs.

Checks: the store's integrity (SQLite's full integrity check, on the file, before it is opened); image files
missing or changed since they were registered; image files cftools wrote that no row points to; items and tasks stuck in an
intermediate state (an item under review with no open task, a task without a server id); items waiting only on
people no longer on the team; tasks a pull returned or handed over but never sent; work claims held by dead
workers; export temporaries a killed export left; live tasks the store believes pushed that their Label Studio
server (the shared one or a person's own) no longer holds (when servers are configured); releases of every format
that no longer verify, or whose manifest is not the one the store recorded at export.

Repairs (only with `repair=True`, each listed): tasks a pull returned or handed over but never sent are sent, to
the person and with the note the pull planned; stuck items go back to the status they can be picked up from,
dead claims are freed, image files cftools wrote that no row points to removed, dead tasks forgotten (their items back to
`checked`), stale export temporaries removed; the copies a killed export left are judged by the store: only one
whose manifest is the one the store recorded (and that verifies) is renamed back into place when the release is
missing; every other `.old` copy is moved aside under a name that says what it is (`.unrecorded`: verifies against
its own manifest, which is not the store's, an earlier export or a rewrite; `.broken`: does not verify;
`.unverified`: the store recorded no manifest; `.kept`: the store's, not needed), never deleted.
Missing or changed images and releases that fail to verify are reported, never "fixed": only a person knows
which copy is right.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from sqlalchemy import insert, select, text, update

from cftools.errors import CftoolsError
from cftools.generate.claims import FREE, LEASED, is_dead_local_worker
from cftools.images import sha256_file
from cftools.models import CHECKED, IN_REVIEW, AnnotationTask, Image, Item, ItemEvent, Release, WorkClaim, utcnow
from cftools.release.swap import clear_stale_temporaries
from cftools.workspace import Workspace

STAGE = "doctor"
DELETED = "deleted"
WAITING_ON_PEOPLE_GONE = "waiting_on_people_gone"
TASK_NOT_SENT = "task_not_sent"


@dataclass
class Finding:
    code: str
    message: str
    repaired: bool = False
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "repaired": self.repaired, **self.detail}


@dataclass
class DoctorReport:
    findings: list[Finding] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Nothing is left wrong (all found was repaired)."""
        return all(f.repaired for f in self.findings)

    def add(self, code: str, message: str, **detail: Any) -> Finding:
        finding = Finding(code, message, detail=detail)
        self.findings.append(finding)
        return finding

    def repaired(self, finding: Finding, change: str) -> None:
        finding.repaired = True
        self.changes.append(change)

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "checked": self.checked, "problems": [f.as_dict() for f in self.findings],
                "changes": self.changes}


def check_integrity(workspace: Workspace, report: DoctorReport) -> bool:
    """False when the store is too damaged to look further. A SQLite file gets SQLite's full integrity check, on the
    file itself before the store is opened (opening refuses a damaged file in one line: doctor names the damage)."""
    from cftools.store_health import (check_store_exists, check_store_writable, damage_message, sqlite_damage,
                                      sqlite_file)

    path = sqlite_file(workspace.db_url)
    if path is not None:
        check_store_exists(workspace.db_url)
        check_store_writable(path)  # SQLite cannot open a WAL store it cannot write: that is no damage
        damage = sqlite_damage(path, full=True)
        if damage:
            report.add("store_integrity", damage_message(path, damage), path=str(path), damage=damage)
            return False
    store = workspace.store
    with store.engine.connect() as conn:
        if store.is_sqlite:
            broken = conn.execute(text("PRAGMA foreign_key_check")).fetchall()
            if broken:
                report.add("store_foreign_keys", f"{len(broken)} rows point at rows that do not exist",
                           rows=[list(r) for r in broken[:20]])
        else:
            conn.execute(text("SELECT 1"))
    report.checked["store"] = 1
    return True


def check_images(workspace: Workspace, report: DoctorReport) -> None:
    with workspace.store.session() as session:
        images = session.execute(select(Image.id, Image.sha256, Image.path)).all()
    report.checked["images"] = len(images)
    for image_id, sha, path in images:
        file = Path(path)
        if not file.is_file():
            report.add("image_missing", f"image {image_id}: {path} is missing", image=image_id, path=path)
        elif sha256_file(file) != sha:
            report.add("image_changed", f"image {image_id}: {path} changed since it was registered "
                                        f"(SHA-256 differs)", image=image_id, path=path)


def check_generated_files(workspace: Workspace, report: DoctorReport, repair: bool) -> None:
    """Image files cftools wrote that no row points to (neither an image of the store nor the images request cache):
    what a `generate images` or an `ingest hf` killed or out of space between writing the files and recording them
    leaves."""
    import json

    from cftools.images import GENERATED_IMAGES_FOLDER, IMAGE_CACHE_BACKEND
    from cftools.ingest.hf import SOURCE_IMAGES_FOLDER
    from cftools.models import CachedResponse

    folders = {GENERATED_IMAGES_FOLDER: ("??/*.png", "a generated image", "generate images"),
               SOURCE_IMAGES_FOLDER: ("??/*.*", "a dataset's image", "ingest hf")}
    files = {path: kind for folder, (pattern, *kind) in folders.items()
             if (root := workspace.path(*folder.parts)).is_dir() for path in sorted(root.glob(pattern))}
    if not files:
        return
    with workspace.store.session() as session:
        known = set(session.execute(select(Image.sha256)).scalars())
        for text_ in session.execute(select(CachedResponse.output).where(
                CachedResponse.backend == IMAGE_CACHE_BACKEND)).scalars():
            try:
                known.update(json.loads(text_ or "[]"))
            except (ValueError, TypeError):
                continue
    report.checked["generated_image_files"] = len(files)
    for path, (what, command) in files.items():
        if path.stem in known:
            continue
        finding = report.add("image_orphan", f"{path} is {what} no row points to (a {command} run stopped between "
                                             "writing it and recording it)", path=str(path))
        if repair:
            path.unlink(missing_ok=True)
            report.repaired(finding, f"{path}: removed ({command} writes it again)")


def check_stuck_items(workspace: Workspace, report: DoctorReport, repair: bool) -> None:
    """Items under review that no open task waits on (nothing will ever decide them: a skipped, refused or deleted
    task that did not come back), and tasks without a server id."""
    from cftools.annotate.projects import GONE
    from cftools.annotate.pull import unsent_returns
    from cftools.annotate.status import items_without_open_task

    store = workspace.store

    stuck = items_without_open_task(store)
    with store.session() as session:  # a task gone from its server has let go of its id
        no_id = session.execute(select(AnnotationTask.id, AnnotationTask.item_id).where(
            AnnotationTask.state.not_in(GONE), AnnotationTask.ls_task_id.is_(None))).all()
    for task_id, item_id in no_id:
        finding = report.add("task_without_id", f"annotation task {task_id} (item {item_id}) has no server task id",
                             task=task_id, item=item_id)
        if repair:
            with store.write() as session:
                session.execute(update(AnnotationTask).where(AnnotationTask.id == task_id)
                                .values(state=DELETED, updated_at=utcnow()))
            report.repaired(finding, f"annotation task {task_id}: forgotten (no server task id)")
    if no_id and repair:  # their items may be stuck now: look again
        stuck = items_without_open_task(store)
    unsent = {item.id for item, _ in unsent_returns(store)}  # not stuck: a task is due (`check_unsent_tasks`)
    for item_id, key in (row for row in stuck if row[0] not in unsent):
        finding = report.add("item_stuck", f"item {item_id} ({key}) is in review but no open annotation task waits on it",
                             item=item_id, key=key)
        if repair:
            requeue_item(workspace, item_id, {"reason": "in review without an open task"})
            report.repaired(finding, f"item {item_id} ({key}): {IN_REVIEW} -> {CHECKED} (pushed again next time)")


def check_unsent_tasks(workspace: Workspace, report: DoctorReport, repair: bool, server: Optional[bool]) -> None:
    """Tasks a pull returned or handed over whose new task it never sent (killed, or the server failed, in between):
    with --repair (and a server to ask) sent now, to the person and with the note the pull planned; never requeued
    as stuck items (that would send the item to two new people, without the note)."""
    from cftools.annotate.pull import send_unsent, unsent_returns

    unsent = unsent_returns(workspace.store)
    findings = {(item.key, plan["purpose"], plan["to"]): report.add(
        TASK_NOT_SENT, f"item {item.id} ({item.key}): its {plan['purpose']} task for {plan['to']} was returned or handed "
                       "over but never sent (a pull stopped in between); `doctor --repair` or the next `cftools annotate "
                       "pull` sends it", item=item.id, key=item.key, purpose=plan["purpose"], person=plan["to"])
        for item, plan in unsent}
    if not (repair and findings and server is not False):
        return
    from cftools.annotate.assign import Sender
    from cftools.annotate.label_studio import server_settings
    from cftools.annotate.servers import Servers

    settings = server_settings(workspace)
    if not settings.configured:
        return
    servers = Servers(settings)
    try:
        for sent in send_unsent(workspace.store, Sender(workspace, servers, settings)):
            # to the planned person, or to someone else where they left the team since
            finding = findings.get((sent["item"], sent["purpose"], sent["sent_to"])) or next(
                (f for (key, purpose, _), f in findings.items()
                 if (key, purpose) == (sent["item"], sent["purpose"]) and not f.repaired), None)
            if finding is not None:
                report.repaired(finding, f"item {sent['item']}: its {sent['purpose']} task sent to {sent['sent_to']}")
    except CftoolsError as exc:  # left as found: the next pull or repair sends them
        report.add("label_studio_unreachable", f"cannot send the tasks never sent: {exc}")
    finally:
        servers.close()


def check_waiting_on_people_gone(workspace: Workspace, report: DoctorReport) -> None:
    """Items in review waiting only on open tasks of people no longer in [label_studio] annotators: not stuck (a
    pull hands those tasks to someone on the team), so never requeued; each is its own finding, saying what to do."""
    from cftools.annotate.status import current_team, items_without_open_task

    team = current_team(workspace)
    if not team:
        return
    store = workspace.store
    for item_id, key in sorted(set(items_without_open_task(store, team)) - set(items_without_open_task(store))):
        report.add(WAITING_ON_PEOPLE_GONE,
                   f"item {item_id} ({key}) waits only on tasks of people no longer in [label_studio] annotators: "
                   "run `cftools annotate pull` to hand their tasks to someone on the team (with no one left who has "
                   "not had the item, add a person first)", item=item_id, key=key)


def requeue_item(workspace: Workspace, item_id: int, detail: dict[str, Any]) -> None:
    now = utcnow()
    with workspace.store.write() as session:
        changed = session.execute(update(Item).where(Item.id == item_id, Item.status == IN_REVIEW)
                                  .values(status=CHECKED, updated_at=now)).rowcount
        if changed:
            session.execute(insert(ItemEvent.__table__), [{
                "item_id": item_id, "stage": STAGE, "from_status": IN_REVIEW, "to_status": CHECKED,
                "detail": detail, "created_at": now}])


def check_claims(workspace: Workspace, report: DoctorReport, repair: bool) -> None:
    """Leases held by a worker whose process is gone, or lapsed leases nobody took over."""
    store = workspace.store
    now = utcnow()
    with store.session() as session:
        leased = session.execute(select(WorkClaim.id, WorkClaim.generator, WorkClaim.key, WorkClaim.worker,
                                        WorkClaim.lease_expires).where(WorkClaim.state == LEASED)).all()
    report.checked["work_claims_leased"] = len(leased)
    for claim_id, generator, key, worker, expires in leased:
        lapsed = expires is not None and _naive(expires) < _naive(now)
        if not (lapsed or is_dead_local_worker(worker)):
            continue
        why = "its lease lapsed" if lapsed else "its worker's process is gone"
        finding = report.add("claim_dead", f"work claim {generator}:{key} held by {worker}: {why}",
                             claim=claim_id, generator=generator, key=key, worker=worker)
        if repair:
            with store.write() as session:
                session.execute(update(WorkClaim).where(WorkClaim.id == claim_id, WorkClaim.state == LEASED,
                                                        WorkClaim.worker == worker)
                                .values(state=FREE, worker=None, lease_expires=None))
            report.repaired(finding, f"work claim {generator}:{key}: freed (was held by {worker})")


def _naive(value: Any) -> Any:
    return value.replace(tzinfo=None) if getattr(value, "tzinfo", None) else value


def check_releases(workspace: Workspace, report: DoctorReport, repair: bool) -> None:
    """Every release the store recorded, in any format: there, verifying, and with the manifest the store recorded
    (a release whose records and manifest were rewritten together verifies, but is not the one exported)."""
    from cftools.release.export import recorded_manifests
    from cftools.release.layout import MANIFEST_NAME, hash_file
    from cftools.release.swap import cleared_line, describe_temporary, release_copy
    from cftools.release.verify import verify_release

    with workspace.store.session() as session:
        releases = session.execute(select(Release.name, Release.version, Release.format, Release.path,
                                          Release.manifest_sha256)).all()
    report.checked["releases"] = len(releases)
    stale = stale_release_folders(workspace, {Path(row.path).parent for row in releases})
    for name, version, fmt, path, manifest_sha in releases:
        folder = Path(path)
        label = f"release {name} {version} ({fmt}) at {path}"
        if not folder.exists():
            if not any(tmp.name.startswith(f".{folder.name}.pid") and tmp.parent == folder.parent
                       and release_copy(tmp) is not None for tmp in stale):
                report.add("release_missing", f"{label} is gone", release=name, version=version, path=path)
            continue  # else its only copy is in a .old folder (below)
        try:
            verified = verify_release(folder)
        except CftoolsError as exc:
            report.add("release_invalid", f"{label} cannot be verified: {exc}", release=name, path=path)
            continue
        if not verified.ok:
            report.add("release_invalid", f"{label} no longer verifies: {'; '.join(verified.problems()[:5])}",
                       release=name, version=version, path=path, differences=verified.problems())
        elif manifest_sha and (found := hash_file(folder / MANIFEST_NAME)) != manifest_sha:
            report.add("release_manifest_changed",
                       f"{label}: its manifest is not the one exported (the store recorded SHA-256 "
                       f"{manifest_sha[:12]}…, the file's is {found[:12]}…); its files were rewritten together "
                       "with the manifest", release=name, version=version, path=path)
    cleared: dict[Path, dict[Path, str]] = {}  # target -> what clearing its temporaries did (all at once)
    for tmp in stale:
        target = tmp.parent / tmp.name[1:].split(".pid", 1)[0]
        recorded = recorded_manifests(workspace.store, target)
        finding = report.add("release_temporary", describe_temporary(tmp, target, recorded), path=str(tmp))
        if repair:
            if target not in cleared:
                cleared[target] = dict(clear_stale_temporaries(target, recorded))
            action = cleared[target].get(tmp)
            if action:
                report.repaired(finding, cleared_line(tmp, action, target))


def stale_release_folders(workspace: Workspace, parents: set[Path]) -> list[Path]:
    """Export temporaries (`.NAME.pidN.*.tmp` / `.old`) of killed exports in PARENTS and the default release folder."""
    from cftools.release.layout import DEFAULT_OUT_DIR
    from cftools.release.swap import stale_temporaries

    found: list[Path] = []
    for parent in sorted(parents | {workspace.path(DEFAULT_OUT_DIR)}):
        for tmp in sorted(parent.glob(".*.pid*.tmp")) + sorted(parent.glob(".*.pid*.old")):
            target = parent / tmp.name[1:].split(".pid", 1)[0]
            if tmp in stale_temporaries(target):
                found.append(tmp)
    return found


def check_tasks_on_server(workspace: Workspace, report: DoctorReport, repair: bool) -> None:
    """Live tasks the store holds that their server (the shared one or a person's own) confirms are gone."""
    from cftools.annotate.label_studio import server_settings
    from cftools.annotate.servers import Servers

    settings = server_settings(workspace)
    if not settings.configured:
        return
    by_project = live_tasks_by_project(workspace)
    report.checked["annotation_tasks"] = sum(len(tasks) for tasks in by_project.values())
    servers = Servers(settings)
    try:
        for (url, project_id), project_tasks in sorted(by_project.items()):
            server = servers.for_url(url)
            if server is None:
                report.add("label_studio_not_configured", f"{len(project_tasks)} task(s) of project {project_id} "
                           f"live on {url}, which cftools.toml no longer names", server=url, project=project_id)
                continue
            try:
                gone = set(server.tasks_gone(project_id, [t.ls_task_id for t in project_tasks]))
            except CftoolsError as exc:
                report.add("label_studio_unreachable", f"cannot list project {project_id} on {url}: {exc}",
                           server=url, project=project_id)
                continue
            forget_dead_tasks(workspace, report, repair, url, project_id,
                              [t for t in project_tasks if t.ls_task_id in gone])
    finally:
        servers.close()


def live_tasks_by_project(workspace: Workspace) -> dict[tuple[str, int], list[AnnotationTask]]:
    """(server, project) -> the tasks there that still take judgments (not deleted, returned or requeued)."""
    from cftools.annotate.projects import GONE

    with workspace.store.session() as session:
        tasks = session.execute(select(AnnotationTask).where(
            AnnotationTask.state.not_in(GONE), AnnotationTask.ls_task_id.is_not(None))).scalars().all()
        session.expunge_all()
    by_project: dict[tuple[str, int], list[AnnotationTask]] = {}
    for task in tasks:
        by_project.setdefault((task.server, task.ls_project_id), []).append(task)
    return by_project


def forget_dead_tasks(workspace: Workspace, report: DoctorReport, repair: bool, url: str, project_id: int,
                      dead: list[AnnotationTask]) -> None:
    from cftools.annotate.pull import PullReport, mark_deleted
    from cftools.annotate.task_import import StoredTask

    findings = [report.add("task_missing_on_server",
                           f"task {t.ls_task_id} of project {project_id} on {url} (item {t.item_id}) is recorded "
                           f"as pushed but the server does not hold it",
                           server=url, project=project_id, task=t.ls_task_id, item=t.item_id) for t in dead]
    if repair and dead:
        with workspace.store.write() as session:
            mark_deleted(session, [StoredTask.of(task) for task in dead], PullReport())
        for task, finding in zip(dead, findings):
            report.repaired(finding, f"task {task.ls_task_id} of project {project_id} on {url}: forgotten "
                                     f"(item {task.item_id} back to {CHECKED} if it was in review)")


def diagnose(workspace: Workspace, repair: bool = False, server: Optional[bool] = None) -> DoctorReport:
    """Run every check (SERVER: whether to ask Label Studio; default when one is configured)."""
    report = DoctorReport()
    if not check_integrity(workspace, report):
        return report  # a damaged file: reading further could mislead, and nothing is safe to repair
    check_images(workspace, report)
    check_generated_files(workspace, report, repair)
    check_claims(workspace, report, repair)
    if server is not False:
        check_tasks_on_server(workspace, report, repair)
    check_unsent_tasks(workspace, report, repair, server)
    check_stuck_items(workspace, report, repair)
    check_waiting_on_people_gone(workspace, report)
    check_releases(workspace, report, repair)
    return report
