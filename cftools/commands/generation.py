"""What every generator command shares: the LLM options, running with the configured backend, the summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import click
from rich.markup import escape

from cftools.commands.common import console, print_json
from cftools.commands.exit_codes import document_exit_codes, exit_for_failures
from cftools.generate.llm_task import DEFAULT_MAX_ATTEMPTS
from cftools.llm import BACKENDS, make_backend


def llm_options(command: Callable) -> Callable:
    """--backend, --model, --template, --concurrency, --refresh, --max-attempts, --quiet, --json."""
    for option in reversed((
        click.option("--backend", type=click.Choice(BACKENDS), help="LLM backend (default: [llm] backend, else local)."),
        click.option("--model", help="Model name (default: [llm] model)."),
        click.option("--template", "template_path", type=click.Path(dir_okay=False, path_type=Path),
                     help="Your own Jinja2 prompt template (default: the packaged one, or the workspace's copy)."),
        click.option("--concurrency", type=click.IntRange(min=1),
                     help="Requests in flight (default: 8 for openai, 1 for local)."),
        click.option("--refresh", is_flag=True, help="Ignore the request cache and call the model again."),
        click.option("--max-attempts", type=click.IntRange(min=1), default=DEFAULT_MAX_ATTEMPTS, show_default=True,
                     help="Attempts per request when the output cannot be parsed."),
        click.option("--quiet", is_flag=True, help="No progress bar."),
        click.option("--json", "as_json", is_flag=True, help="Print the run's summary as JSON."),
    )):
        command = option(command)
    return document_exit_codes(command)


rederive_option = click.option(
    "--rederive/--no-rederive", default=None,
    help="Then ask the model to re-derive each draft's answer (check answer_disputed); one call per draft "
         "(default: [llm] rederive, else on for a real model, off for the embedded one).")


def rederive_drafts(workspace: Any, llm: Any, config: dict[str, Any], spec: Any, wanted: bool | None,
                    quiet: bool, as_json: bool) -> Any:
    """Re-derive the answers of the kind's drafts when WANTED (None: `[llm] rederive`, see
    cftools.generate.rederive); prints one line (not with --json) and returns the report, or None."""
    from cftools.commands.common import err_console
    from cftools.generate.rederive import rederive, rederive_enabled

    if not (wanted if wanted is not None else rederive_enabled(config, llm.name)):
        return None
    report = rederive(workspace.store, llm, spec, console=err_console, quiet=quiet or as_json,
                      workspace_root=workspace.root)
    if report.stats.interrupted:
        raise click.ClickException("interrupted; what finished is stored, rerun the same command to continue")
    if not as_json:
        console.print(f"answers re-derived by {escape(report.backend)}:{escape(report.model)}: "
                      f"{report.items_created} of {report.selected} drafts ({report.stats.failed} failed); "
                      f"`cftools check` flags the disagreements (answer_disputed)")
    return report


def run_with_llm(workspace: Any, backend: str | None, model: str | None,
                 run: Callable[[Any, dict[str, Any]], Any]) -> Any:
    """RUN(backend, [llm] config) with the configured backend, closed afterwards."""
    config = workspace.section("llm")
    llm = make_backend(config, backend, model)
    try:
        return run(llm, config)
    finally:
        llm.close()


def print_llm_report(report: Any, as_json: bool, what: str) -> None:
    """The summary of an LLM generator run; an interrupted run is an error (rerun to continue)."""
    if as_json:
        print_json(report.as_dict())
    else:
        stats = report.stats
        console.print(f"[bold]{escape(what)}[/] with {escape(report.backend)}:{escape(report.model)}: "
                      f"{report.selected} selected, {report.items_created} written, {stats.failed} failed "
                      f"({report.parse_failures} replies that did not parse, {report.call_errors} call errors), "
                      f"{stats.cached} from the cache, {stats.rate:.1f}/s")
        for error in stats.errors[:5]:
            console.print(f"  [yellow]{escape(str(error))}[/]")
    if report.stats.interrupted:
        raise click.ClickException("interrupted; what finished is stored, rerun the same command to continue")
    exit_for_failures(report.stats.done + report.stats.failed, report.stats.failed, "requests")


