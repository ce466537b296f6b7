"""`cftools annotate push | pull | status`: verification by two people in Label Studio."""

from __future__ import annotations

from typing import Any, Mapping, Optional

import click
from cftools.terminal import escape
from rich.console import Console
from rich.table import Table

from cftools.annotate.controls import control_rate
from cftools.annotate.figures import quality_status
from cftools.annotate.measure import push_flagged_sample
from cftools.annotate.pull import pull
from cftools.annotate.push import push, waiting_kind
from cftools.annotate.serve import serve, stop
from cftools.annotate.task_import import PushOptions
from cftools.annotate.serve import servers_report
from cftools.annotate.separation import reasons_by_person
from cftools.annotate.status import annotation_status, current_team
from cftools.annotate.verification import SHARED
from cftools.commands.annotate_quality import (audit_cmd, controls_cmd, full_width_console, requeue_cmd,
                                               resume_cmd)
from cftools.kinds import get_kind
from cftools.commands.common import err_console, pass_workspace, print_json
from cftools.commands.summary import Line, always, print_lines
from cftools.progress import step_progress
from cftools.workspace import Workspace

quiet_option = click.option("--quiet", is_flag=True, help="Draw no progress on stderr (none is drawn under --json "
                                                           "or when stderr is not a terminal either).")


@click.group()
def annotate() -> None:
    """Verify items in Label Studio: two annotators per item, then adjudication of disagreements.

    The server is [label_studio] url in cftools.toml (or $LABEL_STUDIO_URL); its token is read from the
    environment variable named by [label_studio] token_env (default LABEL_STUDIO_API_KEY).
    """


@annotate.command("push")
@click.option("--kind", help="Item kind (`cftools kinds`); each kind has its own Label Studio project. Default: the "
                              "kind whose items are waiting (an error when items of several kinds are).")
@click.option("--limit", type=click.IntRange(min=1), help="Push at most N items.")
@click.option("--adjudicate", is_flag=True,
              help="Push needs_adjudication items to the adjudication project (with both judgments).")
@click.option("--task", help="One of the kind's own tasks (`cftools kinds` lists them): a task on its items (e.g. "
                              "mucr's select, explain; cvqa's and cfmm's edit) or an authoring task on images whose "
                              "submissions `pull` turns into drafts (e.g. cfmm's author). Default: verify. Needs "
                              "--kind.")
@click.option("--data-uri", is_flag=True,
              help="Embed images in the tasks as data URIs (small sets only; they land in Label Studio's database).")
@click.option("--allow-missing-images", is_flag=True, help="Push items whose source has no image too.")
@click.option("--if-configured", is_flag=True,
              help="Without a configured server (url and token), say how to start one and exit 0.")
@click.option("--flagged-sample", type=click.IntRange(min=1), metavar="N",
              help="Instead, send a seeded sample of N flagged drafts (of --kind, else of every kind) to people as "
                   "measuring tasks, blind to the flags; they never decide the item (`cftools check --calibration`). "
                   "N is a total: the same N again adds nothing, a larger N adds the difference.")
@click.option("--seed", type=int, help="The seed of --flagged-sample's sample (default: 0).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@quiet_option
@pass_workspace
def push_cmd(workspace: Workspace, kind: Optional[str], limit: Optional[int], adjudicate: bool, task: Optional[str],
             data_uri: bool, allow_missing_images: bool, if_configured: bool, flagged_sample: Optional[int],
             seed: Optional[int], as_json: bool, quiet: bool) -> None:
    """Push checked items as tasks (batched); pushed items move to in_review. Pushing again adds only new ones.

    With --task, push one of the kind's own tasks; an authoring task pushes the store's images instead, one task
    per image not yet pushed. With --flagged-sample, push measuring tasks of flagged drafts instead."""
    if task and task != "verify" and not kind:
        raise click.UsageError("--task needs --kind (the kind whose task it is)")
    if flagged_sample is None and seed is not None:
        raise click.UsageError("--seed is the seed of --flagged-sample's sample: give --flagged-sample N")
    if flagged_sample is not None and (adjudicate or task or limit or if_configured):
        raise click.UsageError("--flagged-sample pushes measuring tasks of flagged drafts alone: leave out "
                               "--adjudicate, --task, --limit and --if-configured")
    if flagged_sample is not None:
        images = PushOptions(data_uri=data_uri, allow_missing_images=allow_missing_images)
        measured = push_flagged_sample(workspace, flagged_sample, seed or 0, kind, images)
        if as_json:
            print_json(measured.as_dict())
        else:
            print_flagged_sample(measured)
        return
    kind = kind or waiting_kind(workspace.store, adjudicate)
    with step_progress(err_console, quiet=quiet, as_json=as_json, labels={"push": "pushing tasks"}) as progress:
        report = push(workspace, kind=kind, limit=limit, adjudicate=adjudicate, data_uri=data_uri,
                      allow_missing_images=allow_missing_images, if_configured=if_configured, progress=progress,
                      task=task)
    if as_json:
        print_json(report.as_dict())
        return
    print_push(report, kind, task, adjudicate, control_rate(workspace))


def nothing_waits(value: Any, shown: Mapping[str, Any]) -> bool:
    """Nothing was pushed and no project named (a MuCR select tiebreak, say, goes out at pull): no warning to give."""
    report = shown["report"]
    return not report.pushed and not report.project_ids and not report.project_url


def pushed_to_people(project_ids: dict[str, int], shown: Mapping[str, Any]) -> list[str]:
    report = shown["report"]
    return [f"Pushed {report.pushed} {shown['kind']} {shown['what']} tasks to the projects of "
            f"{len(project_ids)} people (verification: {report.verification}):"] + [
        f"  {escape(person)}: {report.assigned.get(person, 0)} new tasks in "
        f"{escape(report.project_urls.get(person, ''))}" for person in sorted(project_ids)]


def shared_servers(verification: str, shown: Mapping[str, Any]) -> bool:
    return verification == SHARED and shown["pushed"] != "images"


PUSH_LINES = (
    Line("configured", lambda _, shown: f"[yellow]Label Studio not configured[/]: {escape(shown['report'].message)}. "
                                        "Skipping the push.", when=lambda configured, _: not configured, stop=True),
    Line("message", "{value}", stop=True),
    Line("pushed", "Nothing to push: no {kind} items wait for {what}.", when=nothing_waits, stop=True),
    Line("project_ids", pushed_to_people),
    Line("project_url", "Pushed {report.pushed} {pushed} to the {kind} {what} project: [bold]{report.project_url}[/] "
                        "(verification: {report.verification})", when=lambda _, shown: not shown["report"].project_ids),
    Line("separation", "[red]Not blind:[/] {value}", each=True, to_stderr=True),
    Line("verification", f"[yellow]Warning:[/] {SHARED}: every annotator of one Label Studio Community server can "
                         "open the others' projects and judgments. Give each person a server of their own "
                         + escape('([label_studio.people."EMAIL"], `cftools annotate serve`).'),
         when=shared_servers, to_stderr=True),
    # escaped: rich would take "[annotate]" for a style and print nothing of it
    Line("controls", f"{{value}} of them are control items (mixed in at {escape('[annotate] control_rate')} = "
                     "{rate:g})."),
    Line("paused", "[yellow]Paused {person}[/]: {reason}; they get no new tasks until `cftools annotate resume "
                   "{person}`.", each=True),
    Line("reconciled", "Recorded {value} tasks already on the server from an interrupted push."),
    Line("duplicates_on_server", "[yellow]{value} duplicate tasks on the server were left alone.[/]"),
    Line("skipped_no_image", "[yellow]{value} items skipped: no image (--allow-missing-images pushes them "
                             "anyway).[/]"),
    Line("skipped_outside_root", "[yellow]{value} items skipped: image outside the document root.[/]"),
)


FLAGGED_SAMPLE_LINES = (
    Line("sample", "Sample of {value} flagged drafts (seed {report.seed}) among {report.flagged}: "
                   "{report.measured_before} measured before, {report.pushed} measuring tasks pushed now.", when=always),
    Line("assigned", lambda assigned, _: [f"  {escape(person)}: {n} new tasks" for person, n in assigned.items()],
         when=always),  # in the order people were given tasks
    Line("reconciled", "Recorded {value} tasks already on the server from an interrupted push."),
    Line("skipped_no_image", "[yellow]{value} drafts skipped: no image (--allow-missing-images pushes them "
                             "anyway).[/]"),
    Line("skipped_outside_root", "[yellow]{value} drafts skipped: image outside the document root.[/]"),
)


def print_flagged_sample(report: Any) -> None:
    """What a --flagged-sample push did, in words."""
    print_lines(FLAGGED_SAMPLE_LINES, report, full_width_console(), err_console)


def print_push(report: Any, kind: Optional[str], task: Optional[str], adjudicate: bool, rate: float) -> None:
    """What a push did, in words (stdout; warnings on stderr); RATE: the [annotate] control_rate it mixed controls
    in at."""
    what = "adjudication" if adjudicate else "verification" if task in (None, "verify") else task
    authoring = report.configured and not report.message and task in get_kind(kind).hooks.annotate.authoring_tasks
    pushed = "images" if authoring else f"{kind} items"
    print_lines(PUSH_LINES, report, full_width_console(), err_console, kind=escape(str(kind)), what=escape(what),
                pushed=pushed, rate=rate)


def returned_to(returned: tuple[str, list[dict[str, Any]]], shown: Mapping[str, Any]) -> list[str]:
    person, entries = returned
    back = [entry for entry in entries if not entry.get("sent_to") and not entry.get("unassigned")]
    away = [entry for entry in entries if entry.get("sent_to")]  # the person left the team: someone else has it
    kept = [entry for entry in entries if entry.get("unassigned")]  # ... and no one could take it
    lines = [f"[yellow]returned to {escape(person)}: {len(back)} tasks, each as a new task saying why[/]"] + [
        f"  task {entry['task']}: {escape(entry['reason'])}" for entry in back] if back else []
    if away:
        lines += [f"[yellow]{escape(person)} is no longer in {escape('[label_studio]')} annotators: {len(away)} "
                  "tasks sent to others as new tasks[/]"] + [
            f"  task {entry['task']}: sent to {escape(entry['sent_to'])} ({escape(entry['reason'])})" for entry in away]
    lines += [f"[red]task {entry['task']} of {escape(person)} (no longer in {escape('[label_studio]')} annotators): "
              f"not sent: {escape(entry['unassigned'])}[/]" for entry in kept]
    return lines


def refusal_lines(what: str) -> tuple[Line, ...]:
    """What pull did not count: invalid WHATs, judgments refused by name, and the submissions returned to each
    person with the reason (the judgments' report and the authoring report carry the same three lists)."""
    return (
        Line("invalid", f"[red]rejected {what} {{annotation}} of task {{task}} by {{annotator}}: {{reason}}[/]",
             each=True),
        Line("refused", "[red]{reason}[/]", each=True),
        Line("returned", returned_to, each=True),
    )


def deleted_tasks(deleted: list[dict[str, Any]], shown: Mapping[str, Any]) -> str:
    return (f"[yellow]{len(deleted)} tasks were deleted in Label Studio; "
            f"{sum(d['item_status'] == 'checked' for d in deleted)} items are back to checked, "
            f"{sum(bool(d.get('sent_back_to')) for d in deleted)} sent again as a new task.[/]")


PULL_LINES = (
    Line("annotations", "Pulled {report.annotations} annotations of {report.tasks} tasks in {report.projects} "
                        "projects: {report.judgments_added} judgments added, {report.judgments_updated} updated, "
                        "{report.judgments_unchanged} unchanged, {report.judgments_removed} removed.", when=always),
    Line("decisions", lambda decision_n, _: f"  {decision_n[1]} items {decision_n[0]}", each=True),
    Line("authoring", when=lambda written, _: bool(written.projects), lines=(
        Line("projects", "Authoring: {report.submissions} submissions in {report.projects} projects: "
                         "{report.items_added} new draft items, {report.already_pulled} pulled before, "
                         "{report.no_suitable_type} images with no suitable type.", when=always),
        *refusal_lines("submission"))),
    Line("ignored_same_annotator", "[yellow]{value} extra annotations by the same person ignored.[/]"),
    Line("ignored_extra_annotators", "[yellow]{value} annotations beyond the needed annotators ignored.[/]"),
    Line("cancelled", "{value} skipped (cancelled) annotations."),
    *refusal_lines("annotation"),
    Line("mismatched", lambda bad, _: f"[red]task {bad['task']} carries item {escape(repr(bad['found']))}, "
                                      f"expected {escape(repr(bad['expected']))}; left alone[/]", each=True),
    Line("missing_from_export", lambda missing, _: f"[yellow]{len(missing)} tasks were missing from the export but "
                                                   "are still on the server; they are left as they were and read "
                                                   "again by the next pull.[/]"),
    Line("separation", "[red]Not blind:[/] {value}", each=True),
    Line("servers_not_configured", "[yellow]tasks on {value} were not read: no server in cftools.toml is there any "
                                   "more[/]", each=True),
    Line("deleted_tasks", deleted_tasks),
    Line("handed_over", lambda handed, _: f"[yellow]task {handed['task']} of {escape(handed['from'])} (no longer in "
                                          f"{escape('[label_studio]')} annotators): "
                                          + (f"sent to {escape(handed['sent_to'])}[/]" if handed["sent_to"] else
                                             f"not sent: {escape(handed['unassigned'])}[/]"), each=True),
    Line("resent", lambda resent, _: f"[yellow]item {escape(resent['item'])}: its {escape(resent['purpose'])} task, "
                                     "returned or handed over by a pull that stopped before sending it, sent to "
                                     f"{escape(resent['sent_to'])}[/]", each=True),
    Line("reopened", lambda reopened, _: f"[yellow]{len(reopened)} tasks of a shared project were short of usable "
                                         "judgments: each is offered to one more person.[/]"),
    Line("tiebreaks", lambda tiebreak, _: [f"[red]item {escape(tiebreak['item'])}: {escape(tiebreak['unassigned'])}[/]"]
         if tiebreak.get("unassigned") else [], each=True),  # a tiebreak that found its person says nothing
)


@annotate.command("pull")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@quiet_option
@pass_workspace
def pull_cmd(workspace: Workspace, as_json: bool, quiet: bool) -> None:
    """Fetch annotations: one judgment per task and annotator, then decide, adjudicate, detect deleted tasks."""
    with step_progress(err_console, quiet=quiet, as_json=as_json) as progress:
        report = pull(workspace, progress=progress)
    if as_json:
        print_json(report.as_dict())
        return
    print_lines(PULL_LINES, report, full_width_console(), err_console)


def verification_counts(store: Any) -> dict[str, int]:
    from cftools.annotate.verification import items_by_verification

    return items_by_verification(store)


def _fmt(value: Optional[float], spec: str) -> str:
    return "–" if value is None else format(value, spec)


@annotate.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@pass_workspace
def status_cmd(workspace: Workspace, as_json: bool) -> None:
    """Items per verification set-up; progress per project (tasks, annotations per task, deleted, decisions);
    agreement per question (percent, Krippendorff's alpha, Cohen's kappa); counts per annotator (judgments,
    related: yes, correct: yes, corrections, adjudications) and, with [label_studio] annotators, each person's
    tasks: open (not yet submitted), submitted, returned, skipped, refused. Then annotator quality, per person and per
    kind and task: accuracy on control items (with its 95% confidence interval, against [annotate] min_accuracy),
    Cohen's kappa with each other judge, how often adjudication overturned them, and lead time (median and 90th
    percentile); who is paused (and how to resume them) or named for a pause at the next push. Last, the number of
    items in review with no open task (must be 0) and, for each person whose server's last separation check
    failed, why their judgments are not blind. Piped, tables are printed whole (never cut to the terminal's
    width)."""
    out = full_width_console()
    status = annotation_status(workspace.store, current_team(workspace))
    status["verification"] = verification_counts(workspace.store)
    status["not_blind_because"] = reasons_by_person(workspace.store)
    status["quality"] = quality_status(workspace)
    if as_json:
        print_json(status)
        return
    out.print("Verification: " + (", ".join(f"{n} items on {how}" for how, n in status["verification"].items())
                                  or "no item judged yet"))
    for person, reason in status["not_blind_because"].items():
        out.print(f"[red]Not blind[/] ({escape(person)}'s server, last check): {escape(reason)}")
    table = Table(title="Projects (as of the last pull)", title_justify="left")
    for column in ("server", "project", "purpose", "kind", "tasks", "0 ann.", "1 ann.", "2+ ann.", "deleted",
                   "decisions"):
        table.add_column(column)
    for p in status["projects"]:
        table.add_row(escape(str(p["server"])), str(p["project_id"]), escape(str(p["purpose"])), escape(str(p["kind"])),
                      str(p["tasks"]),
                      str(p["annotations"]["0"]), str(p["annotations"]["1"]), str(p["annotations"]["2+"]),
                      str(p["deleted"]), ", ".join(f"{k}: {v}" for k, v in sorted(p["decisions"].items())))
    out.print(table)
    table = Table(title="Inter-annotator agreement", title_justify="left")
    for column in ("project", "question", "pairs", "agreement %", "Krippendorff's α", "Cohen's κ"):
        table.add_column(column)
    for project, questions in status["agreement"].items():
        for question, s in questions.items():
            table.add_row(escape(str(project)), escape(str(question)), str(s["n_pairs"]), _fmt(s["percent_agreement"], ".1f"),
                          _fmt(s.get("krippendorff_alpha"), ".3f"), _fmt(s["cohen_kappa"], ".3f"))
    out.print(table)
    table = Table(title="Annotators", title_justify="left")
    for column in ("annotator", "judgments", "related: yes", "correct: yes", "corrections", "adjudications"):
        table.add_column(column)
    for name, a in status["annotators"].items():
        table.add_row(escape(str(name)), str(a["judgments"]), str(a["related_yes"]), str(a["correct_yes"]),
                      str(a["corrections"]),
                      str(a["adjudications"]))
    out.print(table)
    if status["people"]:
        table = Table(title="Per person (tasks assigned by cftools)", title_justify="left")
        for column in ("person", "open", "submitted", "returned", "skipped", "refused"):
            table.add_column(column)
        for person, counts in status["people"].items():
            table.add_row(escape(str(person)), *(str(counts[what]) for what in
                                                 ("open", "submitted", "returned", "skipped", "refused")))
        out.print(table)
    print_quality(status["quality"], out)
    stuck, gone = status["in_review_without_open_task"], status["waiting_on_people_gone"]
    out.print(f"Items in review with no open task: {stuck}"
              + (" [red](nothing will decide them: run `cftools doctor`)[/]" if stuck > gone else ""))
    if gone:
        out.print(f"[red]{gone} of them wait only on people no longer in {escape('[label_studio]')} annotators: add "
                  "someone who has not had the item, then `cftools annotate pull` hands their tasks over[/]")


def _interval(figure: Optional[dict]) -> str:
    if not figure:
        return "–"
    return f"{figure['estimate']:.2f} ({figure['low']:.2f}–{figure['high']:.2f})"


def print_quality(quality: dict[str, Any], out: Console) -> None:
    """Each person's accuracy on controls, κ with each other judge, overturn rate and speed, per kind and task."""
    if not quality["people"]:
        return
    table = Table(title=f"Annotator quality (min_accuracy {quality['min_accuracy']:g})", title_justify="left")
    for column in ("person", "kind / task", "controls", "accuracy (95% CI)", "Cohen's κ with", "overturned",
                   "lead time median / p90 (s)"):
        table.add_column(column)
    for person, p in quality["people"].items():
        table.add_row(escape(person) + (" [red](named)[/]" if p["named"] else ""), "all", str(p["controls"]),
                      _interval(p["accuracy"]), "", "", "")
        keys = sorted({(k["kind"], k["task"]) for k in p["kappa"] + p["lead_time"]}
                      | {(o["kind"], "verify") for o in p["overturn"]} | {(k, "verify") for k in p["by_kind"]})
        for kind, task in keys:
            by_kind = p["by_kind"].get(kind) if task == "verify" else None
            kappas = ", ".join(f"{escape(k['with'])} {_fmt(k['kappa'], '.2f')}" for k in p["kappa"]
                               if (k["kind"], k["task"]) == (kind, task))
            over = next((o for o in p["overturn"] if o["kind"] == kind and task == "verify"), None)
            speed = next((s for s in p["lead_time"] if (s["kind"], s["task"]) == (kind, task)), None)
            table.add_row("", escape(f"{kind} {task}"), str(by_kind["controls"]) if by_kind else "",
                          _interval(by_kind["accuracy"]) if by_kind else "", kappas,
                          f"{over['overturned']}/{over['adjudicated']}" if over else "",
                          f"{speed['median_s']:.1f} / {speed['p90_s']:.1f}" if speed else "")
    out.print(table)
    for person, p in quality["people"].items():
        if p["paused"]:
            out.print(f"[yellow]Paused {escape(person)}[/] since {p['paused']['since'][:16]} "
                      f"({escape(p['paused']['by'])}): {escape(p['paused']['why'])}; "
                      f"`cftools annotate resume {escape(person)}` gives them work again.")
        elif p["named"]:
            out.print(f"[yellow]{escape(person)}[/]: accuracy on controls wholly below "
                      f"{quality['min_accuracy']:g}; the next push pauses them.")


@annotate.command("serve")
@click.option("--ls-bin", help="The label-studio binary (default: $LS_BIN, else label-studio on the PATH).")
@click.option("--person", "people", multiple=True, help="Only this person's server (repeatable). Default: everyone "
                                                        'in [label_studio.people."EMAIL"].')
@click.option("--stop", "stop_them", is_flag=True, help="Stop the servers instead (as `annotate stop`).")
@quiet_option
@pass_workspace
def serve_cmd(workspace: Workspace, ls_bin: Optional[str], people: tuple[str, ...], stop_them: bool,
              quiet: bool) -> None:
    """Start one loopback Label Studio per person: own data dir (label-studio/<email>/ in the workspace), own port
    (from the person's url), that person's account its only user. Prints each URL and how each person logs in; a
    password or token made here is shown this once and never written down by cftools."""
    out = full_width_console()
    if stop_them:
        _print_stopped(stop(workspace, people))
        return
    with step_progress(err_console, quiet=quiet) as progress:
        started = serve(workspace, ls_bin, people, progress)
    for s in started:
        if s.already_running:
            out.print(f"{escape(s.email)}: already running at [bold]{s.url}[/] (pid {s.pid})")
            continue
        out.print(f"{escape(s.email)}: [bold]{s.url}[/] (pid {s.pid})")
        if not s.new_account:
            out.print("  log in with the email and the password given when this server was first started")
            continue
        if s.password:
            out.print(f"  log in as {escape(s.email)} with password [bold]{escape(s.password)}[/] "
                      "(shown once: pass it on to them)")
        else:
            out.print(f"  log in as {escape(s.email)} with the password in ${s.password_env}")
        if s.token:
            out.print(f"  API token (shown once): export {s.token_env}={s.token}")


@annotate.command("stop")
@click.option("--person", "people", multiple=True, help="Only this person's server (repeatable).")
@pass_workspace
def stop_cmd(workspace: Workspace, people: tuple[str, ...]) -> None:
    """Stop the Label Studio servers `annotate serve` started (their data stays for the next `serve`)."""
    _print_stopped(stop(workspace, people))


def _print_stopped(stopped: list[str]) -> None:
    out = full_width_console()
    out.print(f"Stopped {len(stopped)} server(s)" + (": " + ", ".join(escape(e) for e in stopped) if stopped
                                                      else "."))


@annotate.command("servers")
@click.option("--json", "as_json", is_flag=True, help="Print the table as JSON.")
@pass_workspace
def servers_cmd(workspace: Workspace, as_json: bool) -> None:
    """Each person's Label Studio server: its URL, whether `annotate serve` runs it here, whether it answers, whether
    their token is set, and whether the last separation check proved it theirs alone (else why not)."""
    out = full_width_console()
    rows = servers_report(workspace)
    if as_json:
        print_json(rows)
        return
    table = Table(title="One server per person", title_justify="left")
    for column in ("person", "url", "running here", "answers", "token", "theirs alone (last check)"):
        table.add_column(column)
    for r in rows:
        table.add_row(escape(r["person"]), escape(r["url"]), f"pid {r['pid']}" if r["pid"] else "no",
                      "yes" if r["answers"] else "no", f"${r['token_env']}" + ("" if r["token_set"] else " (unset)"),
                      f"yes ({r['checked_at'][:16]}, {r['checked_during']})" if r["alone"]
                      else f"[red]no: {escape(r['not_alone_because'])}[/]")
    out.print(table)


annotate.add_command(controls_cmd)
annotate.add_command(resume_cmd)
annotate.add_command(requeue_cmd)
annotate.add_command(audit_cmd)
