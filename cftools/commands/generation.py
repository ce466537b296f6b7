"""What every generator command shares: the LLM options, running with the configured backend, the summary.

The money and batch options (--max-cost, --estimate, --batch-api) reach the runs through the backend
(`cftools.generate.run_controls`), not through each command's parameters: they are read here from the context."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

import click
from cftools.terminal import escape

from cftools.commands.common import console, err_console, print_json, ray_address, ray_option
from cftools.commands.exit_codes import PARTIAL_FAILURE, document_exit_codes, exit_for_failures
from cftools.commands.summary import Line, always, print_lines
from cftools.errors import WorkspaceError
from cftools.generate.llm_task import DEFAULT_MAX_ATTEMPTS, LLMRun
from cftools.generate.run_controls import ControlledBackend, RunControls
from cftools.llm import BACKENDS, make_backend
from cftools.llm.cost import money, price_for

RUN_OPTIONS = "cftools.llm_run_options"  # where the run options wait in the click context


def _keep_run_option(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    ctx.meta.setdefault(RUN_OPTIONS, {})[param.name] = value
    return value


def run_option(*names: str, **kwargs: Any) -> Callable:
    """An option every generator has that its command function does not take (see the module's doc)."""
    return click.option(*names, expose_value=False, callback=_keep_run_option, **kwargs)


ALIASES = "cftools.option_aliases"  # an old spelling's value, waiting for its option's callback (ctx.meta)


def _alias_or_value(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """VALUE, else what the option's old spelling gave (read first when it came first on the command line)."""
    old = ctx.meta.get(ALIASES, {}).get(param.name)
    if value is not None and old is not None and old != value:
        raise click.UsageError(f"{param.opts[0]} {value} and its old spelling say different things ({old})", ctx)
    return value if value is not None else old


def hidden_alias(flag: str, name: str, **kwargs: Any) -> Callable:
    """FLAG, an old spelling of the option whose parameter is NAME: still accepted, not shown in --help. Its
    option reads it through `_alias_or_value`; both given with different values is a usage error."""
    def keep(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is None:
            return value
        given = ctx.params.get(name)
        if given is not None and given != value:
            raise click.UsageError(f"{flag} {value} and its new spelling say different things ({given})", ctx)
        ctx.meta.setdefault(ALIASES, {})[name] = value
        if name in ctx.params and given is None:  # the new spelling was read first, unset
            ctx.params[name] = value
        return value
    return click.option(flag, f"{name}_old_spelling", hidden=True, expose_value=False, callback=keep, **kwargs)


prompt_variant_option = run_option(
    "--prompt-variant", help="Draft with this variant of the generator's prompts: a folder of templates beside the "
    "default ones (prompts/GENERATOR/NAME/), or a folder you give; recorded with each draft, whose item is its own "
    "(both variants' drafts of a source are kept).")


max_cost_option = run_option(
    "--max-cost", type=click.FloatRange(min=0), help="Spend at most this much: each call reserves its worst-case cost "
    "before it is sent, and one that would cross the budget is not started (default: [llm] max_cost; needs a "
    "[llm.prices.\"MODEL\"] entry); what finished is stored and the command exits 3.")
estimate_option = run_option(
    "--estimate", is_flag=True, help="Dry run: print the prompt tokens and the cost estimate of the requests the run "
    "would send, and call nothing.")
batch_api_option = run_option(
    "--batch-api", is_flag=True, help="Send the requests through the Files and Batches API of the openai backend "
    "(cheaper, done within the batch window); a rerun collects a submitted batch.")


def llm_options(command: Callable | None = None, *, backend_flag: str = "--backend") -> Callable:
    """--backend (BACKEND_FLAG; the old --backend then stays a hidden alias), --model, --template, --concurrency,
    --refresh, --max-attempts, --quiet, --json, and the run options (--prompt-variant, --max-cost, --estimate, --ray,
    --batch-api)."""
    if command is None:
        return lambda decorated: llm_options(decorated, backend_flag=backend_flag)
    aliases = () if backend_flag == "--backend" else (
        hidden_alias("--backend", "backend", type=click.Choice(BACKENDS)),)
    for option in reversed((
        click.option(backend_flag, "backend", type=click.Choice(BACKENDS), callback=_alias_or_value,
                     help="LLM backend (default: [llm] backend, else local)."),
        *aliases,
        click.option("--model", help="Model name (default: [llm] model)."),
        click.option("--template", "template_path", type=click.Path(dir_okay=False, path_type=Path),
                     help="Your own Jinja2 prompt template (default: the packaged one, or the workspace's copy)."),
        prompt_variant_option,
        click.option("--concurrency", type=click.IntRange(min=1),
                     help="Requests in flight (default: 8 for openai, 1 for local)."),
        click.option("--refresh", is_flag=True, help="Ignore the request cache and call the model again."),
        click.option("--max-attempts", type=click.IntRange(min=1), default=DEFAULT_MAX_ATTEMPTS, show_default=True,
                     help="Attempts per request when the output cannot be parsed."),
        click.option("--quiet", is_flag=True, help="No progress bar."),
        click.option("--json", "as_json", is_flag=True, help="Print the run's summary as JSON."),
        max_cost_option,
        estimate_option,
        ray_option(expose=False, keep=_keep_run_option),
        batch_api_option,
    )):
        command = option(command)
    return document_exit_codes(command)


def llm_run(workspace: Any, template_path: Optional[Path], concurrency: Optional[int], refresh: bool,
            max_attempts: int, quiet: bool) -> LLMRun:
    """What `llm_options` say about the model calls, as the one value every generator takes (progress on stderr)."""
    from cftools.commands.common import err_console

    context = click.get_current_context(silent=True)
    variant = context.meta.get(RUN_OPTIONS, {}).get("prompt_variant") if context is not None else None
    return LLMRun(template_path=template_path, workspace_root=workspace.root, concurrency=concurrency,
                  refresh=refresh, max_attempts=max_attempts, console=err_console, quiet=quiet, prompt_variant=variant)


redo_option = click.option(
    "--redo", type=click.Choice(["rejected", "flagged"]),
    help="Instead of new drafts: draft again the items people rejected (rejected) or the drafts checks hold "
         "(flagged), giving the model the old draft and the reasons (people's flags, corrections and comments, or "
         "the flags'); each result is a new draft linked to the old item. An item is redone once (a redo rejected "
         "in turn is redone again).")


rederive_option = click.option(
    "--rederive/--no-rederive", default=None,
    help="Then ask the model to re-derive each draft's answer (check answer_disputed); one call per draft "
         "(default: [llm] rederive, else on for a real model, off for the embedded one).")


def rederive_drafts(workspace: Any, llm: Any, config: dict[str, Any], spec: Any, wanted: bool | None,
                    run: LLMRun, as_json: bool) -> Any:
    """Re-derive the answers of the kind's drafts when WANTED (None: `[llm] rederive`, see
    cftools.generate.rederive), with the command's RUN (--concurrency, --refresh, --max-attempts, --quiet; the
    prompt, its variant and the sampling are re-derivation's own); prints one line (not with --json, nor for an
    estimate: nothing was re-derived) and returns the report, or None."""
    from cftools.generate.rederive import rederive, rederive_enabled

    if not (wanted if wanted is not None else rederive_enabled(config, llm.name)):
        return None
    own = replace(run, params=None, template_path=None, prompt_variant=None, workspace_root=workspace.root)
    report = rederive(workspace.store, llm, spec, run=own)
    if report.stats.interrupted:
        raise click.ClickException("interrupted; what finished is stored, rerun the same command to continue")
    estimate = getattr(getattr(llm, "controls", None), "estimate", False)
    if not as_json and not estimate:
        console.print(f"answers re-derived by {escape(report.backend)}:{escape(report.model)}: "
                      f"{report.items_created} of {report.selected} drafts ({report.stats.failed} failed); "
                      f"`cftools check` flags the disagreements (answer_disputed)")
    return report


def run_with_llm(workspace: Any, backend: str | None, model: str | None,
                 run: Callable[[Any, dict[str, Any]], Any]) -> Any:
    """RUN(backend, [llm] config) with the configured backend, closed afterwards; the report gets the run's
    controls (tokens, cost, budget, estimate) as `report.controls`."""
    config = workspace.section("llm")
    llm = backend_for_run(workspace, backend, model, ray_run_address())
    try:
        controls = run_controls(config, llm)
        report = run(ControlledBackend(llm, controls), config)
        report.controls = controls
        return report
    finally:
        llm.close()


def backend_for_run(workspace: Any, backend: str | None, model: str | None, address: str | None) -> Any:
    """The configured LLM backend; with a Ray ADDRESS (`--ray`), one whose calls run on the cluster's workers
    (`cftools.llm.remote`), each taking the command's --concurrency calls at once."""
    config = workspace.section("llm")
    if address is None:
        return make_backend(config, backend, model)
    from cftools.llm.remote import remote_backend

    concurrency = click.get_current_context().params.get("concurrency")
    return remote_backend(config, backend, model, address, workspace.section("ray"), concurrency)


def ray_run_address() -> str | None:
    """The command's --ray (or [ray] address); None: the run's calls are made here."""
    context = click.get_current_context(silent=True)
    if context is None:
        return None
    return ray_address(context, context.meta.get(RUN_OPTIONS, {}).get("ray_address"))


def run_controls(config: dict[str, Any], llm: Any) -> RunControls:
    """The command's --max-cost, --estimate and --batch-api (and their [llm] defaults) for backend LLM."""
    context = click.get_current_context(silent=True)
    options = dict(context.meta.get(RUN_OPTIONS, {})) if context is not None else {}
    price = price_for(config, llm.model)
    max_cost = options.get("max_cost")
    if max_cost is None and config.get("max_cost") is not None:
        max_cost = config["max_cost"]
        if isinstance(max_cost, bool) or not isinstance(max_cost, (int, float)) or max_cost < 0:
            raise WorkspaceError(f"cftools.toml: [llm] max_cost must be a number >= 0, got {max_cost!r}")
    if max_cost is not None and price is None:
        raise WorkspaceError(f'a budget needs the price of {llm.model}: add [llm.prices."{llm.model}"] with '
                             "input_per_mtok and output_per_mtok to cftools.toml")
    batch_api = bool(options.get("batch_api"))
    if batch_api and llm.name != "openai":
        raise WorkspaceError("--batch-api needs the openai backend (an endpoint with the Files and Batches API)")
    return RunControls(config=config, price=price, max_cost=None if max_cost is None else float(max_cost),
                       estimate=bool(options.get("estimate")), batch_api=batch_api,
                       poll_s=float(config.get("batch_poll_s", 30.0)), window=str(config.get("batch_window", "24h")))


def generated(stats: Any, shown: Mapping[str, Any]) -> str:
    report = shown["report"]
    return (f"[bold]{escape(shown['what'])}[/] with {escape(report.backend)}:{escape(report.model)}: "
            f"{report.selected} selected, {report.items_created} written, {stats.failed} failed "
            f"({report.parse_failures} replies that did not parse, {report.call_errors} call errors), "
            f"{stats.cached} from the cache, {stats.rate:.1f}/s")


GENERATION_LINES = (
    Line("stats", generated, when=always),
    Line("stats", lambda _, shown: f"  {escape(shown['controls'].usage.summary())}",
         when=lambda _, shown: shown["controls"] is not None),  # tokens, cache hits and cost
    Line("stats", lambda stats, _: [f"  [yellow]{escape(str(error))}[/]" for error in stats.errors[:5]],
         when=always),
)


def print_llm_report(report: Any, as_json: bool, what: str) -> None:
    """The summary of an LLM generator run; an interrupted run is an error (rerun to continue)."""
    controls: RunControls | None = getattr(report, "controls", None)
    if controls is not None and controls.estimate:
        print_estimate(controls, as_json, what)
        return
    rederived = getattr(report, "rederived", None)  # the re-derivation that followed (rederive_drafts)
    if as_json:
        print_json({**report.as_dict(), **(run_money(controls) if controls is not None else {}),
                    **({"rederive": rederived.as_dict()} if rederived is not None else {})})
    else:
        print_lines(GENERATION_LINES, report, console, err_console, what=what, controls=controls)
    if report.stats.interrupted:
        raise click.ClickException("interrupted; what finished is stored, rerun the same command to continue")
    stop_for_budget(controls)
    exit_for_failed_requests(report.stats, rederived.stats if rederived is not None else None)


def exit_for_failed_requests(*runs: Any) -> None:
    """Exit 3 or 4 when requests of RUNS (each with `done` and `failed`; None: did not run) failed."""
    ran = [run for run in runs if run is not None]
    exit_for_failures(sum(run.done + run.failed for run in ran), sum(run.failed for run in ran), "requests")


def stop_for_budget(controls: RunControls | None) -> None:
    """When the budget stopped the run: one line on what was spent and what is left, and exit code 3."""
    if controls is None or not controls.stopped:
        return
    unmetered = controls.usage.unmetered_note().removeprefix("; ")
    click.secho(f"Warning: the budget stopped the run: {money(controls.usage.cost)} spent"
                f"{f' ({unmetered})' if unmetered else ''} of {money(controls.max_cost or 0)}; {controls.left} of "
                f"{controls.selected} requests left to do "
                "(what finished is stored; rerun with a larger --max-cost to go on)", fg="yellow", err=True)
    click.get_current_context().exit(PARTIAL_FAILURE)


def run_money(controls: RunControls) -> dict[str, Any]:
    """The run's tokens, cache hits and cost (and the budget, when one was set) for --json."""
    extra: dict[str, Any] = {"usage": controls.usage.as_dict()}
    if controls.max_cost is not None:
        extra["budget"] = {"max_cost": controls.max_cost, "spent": round(controls.usage.cost, 6),
                           "stopped": controls.stopped, "left_to_do": controls.left}
    return extra


def print_estimate(controls: RunControls, as_json: bool, what: str) -> None:
    """--estimate: what the run would send and cost; nothing was called."""
    if as_json:
        print_json({"estimate": controls.estimates})
        return
    for estimate in controls.estimates or [{"requests": 0, "cached": 0, "prompt_tokens": 0}]:
        cost = ("cost unknown (no [llm.prices] entry for the model)" if estimate.get("cost_max") is None else
                f"at most {money(estimate['cost_max'])}" + (f", about {money(estimate['cost_typical'])} at this "
                                                            "generator's usual output length"
                                                            if estimate.get("cost_typical") is not None else ""))
        console.print(f"[bold]{escape(what)}[/] ({escape(str(estimate.get('generator', '')))}, estimate only, nothing "
                      f"called): {estimate['requests']} requests to send, {estimate['cached']} from the cache; "
                      f"{estimate['prompt_tokens']:,} prompt tokens "
                      f"{escape(str(estimate.get('tokens_counted_by', '')))}; {escape(cost)}"
                      + (" with the Batch API discount" if estimate.get("batch_api") else ""))


