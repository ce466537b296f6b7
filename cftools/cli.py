"""The `cftools` command line: thin wrappers over the library modules."""

from __future__ import annotations

import errno
import gc
import importlib
import os
import sys
from pathlib import Path
from typing import Callable

import click
from cftools.terminal import escape
from rich.table import Table

from cftools import __version__
from cftools.commands.common import console, json_option, pass_workspace, print_json
from cftools.errors import CftoolsError
from cftools.workspace import Workspace, init_workspace, without_password


OUT_OF_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def database_error(exc: BaseException) -> bool:
    """EXC is SQLAlchemy's DatabaseError (looked up only once SQLAlchemy is loaded: none can be raised before)."""
    errors = sys.modules.get("sqlalchemy.exc")
    return errors is not None and isinstance(exc, errors.DatabaseError)


def failed_command(exc: BaseException, ctx: click.Context) -> str:
    """The command EXC came out of (`cftools ingest edits`): the innermost click context on its way up (a sub-group's
    context is gone by the time the error reaches the top)."""
    path = ctx.command_path
    frame = exc.__traceback__
    while frame is not None:
        inner = frame.tb_frame.f_locals.get("ctx")
        if isinstance(inner, click.Context):
            path = inner.command_path
        frame = frame.tb_next
    return path


class CftoolsGroup(click.Group):
    """Turns the library's errors into one clear line and a non-zero exit."""

    def invoke(self, ctx: click.Context):  # noqa: ANN201
        try:
            return super().invoke(ctx)
        except CftoolsError as exc:
            if exc.is_warning:
                click.secho(f"Warning: {exc}", fg="yellow", err=True)
                ctx.exit(1)
            error = click.ClickException(str(exc))  # the message with its hint's option put in (errors.Hint)
            error.exit_code = exc.exit_code  # 3 or 4 for failed requests (cftools.commands.exit_codes)
            raise error from None
        except ModuleNotFoundError as exc:  # an extra that is not installed: say which, in one line
            from cftools.extras import missing_extra_message

            line = missing_extra_message(failed_command(exc, ctx), exc.name or "")
            if line is None:
                raise
            raise click.ClickException(line) from None
        except OSError as exc:
            if exc.filename is None and exc.errno in OUT_OF_SPACE:
                # a writer that does not name its file (see cftools.errors.naming_the_file): one line all the same
                raise click.ClickException(f"cannot write a file: {os.strerror(exc.errno)}") from None
            if exc.filename is None or exc.strerror is None:
                raise
            # a read-only or full target folder: one line naming the file; the writer left the store unchanged
            raise click.ClickException(f"cannot write {exc.filename}: {exc.strerror}") from None
        except Exception as exc:
            if not database_error(exc):
                raise
            from cftools.store_health import DAMAGED_HINT, is_damage_error, is_full_error, is_read_only_error

            if is_full_error(exc):  # the store's own disk filled up: its transaction was rolled back whole
                raise click.ClickException(f"cannot write the store: {' '.join(str(exc.orig).split())} (is its disk "
                                           "full? nothing of the failed step was recorded; free some space and "
                                           "rerun)") from None
            if is_read_only_error(exc):  # made read-only after the open check (or a read-only file system)
                raise click.ClickException(f"cannot write the store: it is read-only "
                                           f"({' '.join(str(exc.orig).split())})") from None
            if not is_damage_error(exc):
                raise
            # a damaged page the open check did not reach (a store above its size limit): one line all the same
            raise click.ClickException(f"the store is damaged: {' '.join(str(exc.orig).split())}; "
                                       f"{DAMAGED_HINT}") from None


class LazyGroup(CftoolsGroup):
    """The stages' commands imported when one is used (LAZY_COMMANDS, below), not to list them."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in LAZY_COMMANDS:
            return lazy_command(cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The list of commands, without importing the lazy ones (their line is LAZY_COMMANDS')."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        listed = {name: click.Command(name, help=LAZY_COMMANDS[name][1]) if name in LAZY_COMMANDS
                  else self.commands[name] for name in names}  # a stand-in carries a lazy command's line
        rows = [(name, command.get_short_help_str(limit)) for name, command in listed.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup)
@click.version_option(__version__, prog_name="cftools")
@click.option("-w", "--workspace", type=click.Path(file_okay=False, path_type=Path),
              help="Workspace folder (default: $CFTOOLS_WORKSPACE, then the current folder).")
def main(workspace: Path | None) -> None:
    """Author, verify, release and evaluate counterfactual multimodal benchmarks.

    The flow is ingest -> generate -> check -> annotate -> export -> eval, over one item store.

    Exit codes: 0 all done (or nothing to do); 1 error (one line on stderr) or interrupted; 2 bad usage;
    3 partial failure (some requests failed, the rest are stored: rerun to retry them); 4 every request
    failed (nothing new stored). `cftools doctor` exits 1 when it finds a problem it did not repair.
    """


@main.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--db", "db_url", help="SQLAlchemy URL of the store (default: a SQLite file in the workspace). "
                                     "A password in it is used now and never written to cftools.toml.")
@click.option("--password-env", help="Variable that holds the store's password later (default: PGPASSWORD).")
@click.option("--with-prompts", is_flag=True,
              help="Copy the prompts and Label Studio configs into the workspace to edit; a file there wins.")
def init(directory: Path, db_url: str | None, password_env: str | None, with_prompts: bool) -> None:
    """Create a workspace in DIRECTORY: cftools.toml and the item store."""
    workspace = init_workspace(directory, db_url, password_env)
    if with_prompts:
        from cftools.resources import copy_overridable

        copied = copy_overridable(workspace.root)
        console.print(f"{len(copied)} prompt and label-config files copied into {workspace.root} (prompts/, annotation/)")
    console.print(f"Workspace ready at [bold]{workspace.root}[/] (store: {workspace.store.safe_url}, "
                  f"schema {workspace.store.schema_version})")
    if db_url and without_password(db_url)[1] is not None:
        console.print(f"The password was not written to cftools.toml; set ${workspace.password_env} "
                      "when you use this workspace.")
    workspace.close()


def _count_table(title: str, counts: dict[str, int]) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column(title.split()[-1].capitalize())
    table.add_column("count", justify="right")
    for name, n in counts.items():
        table.add_row(escape(str(name)), str(n))  # dataset and group names come from the data
    return table


@main.command()
@click.option("--kind", help="Also show the kind's own figures (e.g. cfmm: items per type and status beside the quota).")
@click.option("--cost", is_flag=True, help="Tokens, cache hits and cost of the model calls, per generator and model "
                                           "(priced with [llm.prices]).")
@json_option
@pass_workspace
def status(workspace: Workspace, kind: str | None, cost: bool, as_json: bool) -> None:
    """Counts of items by source, group and status."""
    from cftools.kinds import get_kind
    from cftools.overview import store_counts

    if cost:
        print_cost(workspace, as_json)
        return
    counts = store_counts(workspace.store)
    table = get_kind(kind).hooks.annotate.status_table(workspace.store, workspace) if kind else None
    if as_json:
        if table is not None:
            counts["kind_table"] = {"kind": kind, "title": table.title, "columns": table.columns, "rows": table.rows}
        print_json(counts)
        return
    console.print(f"[bold]{workspace.root}[/]: {counts['items']} items, {counts['sources']} source questions, "
                  f"{counts['images']} images ({counts['sources_missing_image']} source questions without an image)")
    console.print(_count_table("Items by status", counts["by_status"]))
    console.print(_count_table("Items by group", counts["by_group"]))
    console.print(_count_table("Items by source", counts["by_source"]))
    console.print(_count_table("Source questions by dataset", counts["sources_by_dataset"]))
    if table is not None:
        rich_table = Table(title=table.title, title_justify="left")
        for column in table.columns:
            rich_table.add_column(column)
        for row in table.rows:
            rich_table.add_row(*(escape(cell) for cell in row))
        console.print(rich_table)


def print_cost(workspace: Workspace, as_json: bool) -> None:
    from cftools.llm.cost import money, spending

    rows = spending(workspace.store, workspace.section("llm"))
    if as_json:
        print_json({"cost": rows})
        return
    table = Table(title="Model calls by generator and model", title_justify="left")
    for column in ("generator", "model", "calls", "batch", "tokens in", "tokens out", "cache hits",
                   "tokens not paid", "cost"):
        table.add_column(column, justify="left" if column in ("generator", "model") else "right")
    for row in rows:
        table.add_row(escape(row["generator"]), escape(row["model"]), str(row["requests"]), str(row["batch_requests"]),
                      f"{row['prompt_tokens']:,}", f"{row['completion_tokens']:,}", str(row["cache_hits"]),
                      f"{row['cached_prompt_tokens'] + row['cached_completion_tokens']:,}",
                      money(row["cost"]) if row["priced"] else "no price")
    console.print(table)
    priced = [row["cost"] for row in rows if row["priced"]]
    console.print(f"total {money(sum(priced))}" + (escape(" (models without a [llm.prices] entry not counted)")
                                                   if len(priced) < len(rows) else ""))


@main.command()
@click.argument("item_id", type=int)
@json_option
@pass_workspace
def show(workspace: Workspace, item_id: int, as_json: bool) -> None:
    """Show one item with its source question, image, flags and history."""
    from cftools.overview import item_detail

    detail = item_detail(workspace.store, item_id)
    if detail is None:
        raise click.ClickException(f"no item with id {item_id}")
    if as_json:
        print_json(detail)
        return
    item, source, image = detail["item"], detail["source"], detail["image"]
    console.print(f"[bold]Item {item['id']}[/] ({escape(item['kind'])}, {escape(item['group'])}) — status "
                  f"[bold]{escape(item['status'])}[/]")
    console.print(f"  question: {escape(item['question'])}")
    console.print(f"  answer:   {escape(str(item['answer']))}")
    if item.get("proposed_answer"):
        console.print(f"  proposed answer (before correction): {escape(item['proposed_answer'])}")
    if source:
        console.print(escape(f"  source ({source['dataset']} {source['external_id']}): {source['question']} -> {source['answer']}"))
    if image:
        console.print(f"  image: {escape(image['path'])} ({image['width']}x{image['height']} {image['format']}, "
                      f"sha256 {image['sha256'][:12]}…)")
    elif source:
        console.print(f"  image: {escape(source['image_ref'])} [yellow](missing)[/]")
    if detail["generation"]:
        gen = detail["generation"]
        console.print(escape(f"  generated by {gen['backend']}:{gen['model']} with {gen['template_name']} "
                             f"({(gen['template_hash'] or '')[:12]})"))
    for flag in detail["flags"]:
        console.print(f"  [red]flag {escape(flag['code'])}[/]: {escape(flag['reason'])}")
    _print_edit_ranking(item.get("data") or {})
    for judgment in detail["judgments"]:
        console.print(escape(f"  judgment by {judgment['annotator']}: related={judgment['related']} "
                             f"correct={judgment['answer_correct']} corrected={judgment['corrected_answer']}"))
    table = Table(title="History", title_justify="left")
    for column in ("when", "stage", "from", "to", "detail"):
        table.add_column(column)
    for event in detail["history"]:
        table.add_row(str(event["created_at"]), escape(event["stage"]), escape(event["from_status"] or ""),
                      escape(event["to_status"] or ""), escape(str(event["detail"] or "")))
    console.print(table)


def _print_edit_ranking(data: dict) -> None:
    """`show`'s edit candidates: per edit (relevant, irrelevant), the ranking best first with each flag's reason."""
    from cftools.flags import EDIT_CHECK_SETS, waived_codes

    waived = waived_codes(data)
    for key, label in EDIT_CHECK_SETS:
        candidates = data.get(key.replace("_checks", "_candidates")) or {}
        ranking = data.get(key) or []
        if not ranking:
            continue
        selected = data.get(key.replace("_checks", "_selected"))
        console.print(f"  {label}s ranked best first ({key}):")
        for rank, check in enumerate(ranking, 1):
            k = check.get("k")
            image = str((candidates.get(str(k)) or {}).get("image") or "")
            chosen = " [green]accepted by people[/]" if selected is not None and str(selected) == str(k) else ""
            console.print(f"    {rank}. {label} {escape(str(k))} score {check.get('score')} changed "
                          f"{check.get('changed_share')} ssim outside {check.get('ssim_outside')} "
                          f"{escape(image[:19])}{'…' if len(image) > 19 else ''}{chosen}")
            for flag in check.get("flags") or []:
                code = str(flag.get("code"))
                note = " (waived)" if code in waived else ""
                console.print(f"       [red]flag {escape(code)}[/]{note}: {escape(str(flag.get('reason')))}")


# The later stages' commands live in cftools.commands.<area> and are imported when one of them runs (or its help
# is asked for): `cftools --help` and the commands above do not pay for the stages' libraries (SQLAlchemy models,
# numpy, HTTP clients, the kinds), see bench/bench_startup.py. What `cftools --help` lists for each is below;
# tests/test_cli.py checks it is the command's own first help line.
def _ingest() -> click.Command:
    from cftools.commands.export import ingest_release_cmd
    from cftools.commands.ingest import ingest
    from cftools.commands.kinds import add_kind_commands

    ingest.add_command(ingest_release_cmd)
    add_kind_commands({"ingest": ingest})
    return ingest


def _generate() -> click.Command:
    from cftools.commands.generate import generate
    from cftools.commands.kinds import add_kind_commands

    add_kind_commands({"generate": generate})
    return generate


def _export() -> click.Command:
    from cftools.commands.export import export_cmd
    from cftools.commands.kinds import add_kind_options

    add_kind_options({"export": export_cmd})
    return export_cmd


def _eval() -> click.Command:
    from cftools.commands.evaluate import eval_group
    from cftools.commands.kinds import add_kind_options

    add_kind_options({"eval": eval_group.commands["run"]})
    return eval_group


def _attribute(module: str, name: str) -> Callable[[], click.Command]:
    return lambda: getattr(importlib.import_module(module), name)


LAZY_COMMANDS: dict[str, tuple[Callable[[], click.Command], str]] = {
    "annotate": (_attribute("cftools.commands.annotate", "annotate"),
                 "Verify items in Label Studio: two annotators per item, then adjudication of disagreements."),
    "check": (_attribute("cftools.commands.check", "check"),
              "Run the automatic checks on draft items; clean items move to 'checked'."),
    "doctor": (_attribute("cftools.commands.doctor", "doctor_cmd"),
               "Check a workspace: store integrity (naming damaged pages), missing or changed image files, generated "
               "image files no row points to, items stuck in an intermediate state, items waiting only on people no "
               "longer on the team, tasks a pull returned or handed over but never sent, work claims of dead workers, "
               "tasks the store believes pushed but the server lacks (when Label Studio is configured), releases of "
               "any format that no longer verify or whose manifest is not the one exported."),
    "eval": (_eval, "Score a model on a release: `cftools eval RELEASE --model SPEC [options]`."),
    "export": (_export, "Export the accepted items as the release NAME-VERSION (a verifiable, byte-reproducible "
                        "folder)."),
    "flags": (_attribute("cftools.commands.flags", "flags_group"),
              "List check flags, and waive one a person has looked at (recorded with who and when in the item's "
              "history; a waived flag no longer blocks the item: the next `cftools check` moves it on)."),
    "generate": (_generate, "Generate counterfactual items with an LLM (the embedded offline model by default) or an "
                            "image model."),
    "ingest": (_ingest, "Read source questions, images and existing items into the store."),
    "kinds": (_attribute("cftools.commands.kinds", "kinds_cmd"),
              "List the registered kinds with the stages they fill, their generators, checks, task configs, export "
              "formats and metrics."),
    "preflight": (_attribute("cftools.commands.preflight", "preflight_cmd"),
                  "What RELEASE can show, per kind and group: items, questions and images; the smallest accuracy "
                  "difference between two models it detects (80% power, alpha 0.05, paired test clustered by image); "
                  "the human ceiling with its Wilson interval; chance and the blind floor."),
    "release": (_attribute("cftools.commands.release", "release_group"),
                "Compare releases: `cftools release diff A B` lists what changed and traces the stored runs' scores."),
    "report": (_attribute("cftools.commands.report", "report_cmd"),
               "Where items die and what they cost: the funnel per kind, group and generator, cost per accepted item, "
               "why items die, and a page that drills down to the items (people only as pseudonyms)."),
    "verify": (_attribute("cftools.commands.export", "verify_cmd"),
               "Re-hash every file of RELEASE against its manifest, check croissant.json (the SHA-256s it lists; "
               "mlcroissant reads it, when installed) and scan every file for personal data (an email, a local "
               "absolute path, an image's metadata); exit 1 naming each changed, missing or extra file and each finding."),
}
_loaded: dict[str, click.Command] = {}


def lazy_command(name: str) -> click.Command:
    """The command NAME of LAZY_COMMANDS, imported and wired to the kinds once."""
    if name not in _loaded:
        _loaded[name] = LAZY_COMMANDS[name][0]()
    return _loaded[name]




def run() -> None:
    """The console entry point: `main`, then an exit that skips the interpreter's last full collection."""
    try:
        main(prog_name="cftools")
    finally:
        # Everything is freed at exit anyway; collecting the ~100k objects the imports made first costs most of a
        # second of CPU per command (more than the whole run of a short one, and paid by every parallel worker).
        gc.freeze()


if __name__ == "__main__":
    run()
