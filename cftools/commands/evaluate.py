"""`cftools eval RELEASE --model SPEC`, `cftools eval merge RUN` and `cftools eval compare RUN_A RUN_B` (thin over
cftools.evaluate.run, .merge and .shards)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Optional

import click
from cftools.terminal import escape

from cftools.commands.common import console, err_console, optional_workspace, ray_option
from cftools.commands.common import ray_address as ray_address_of
from cftools.commands.summary import Line, always, print_lines
from cftools.errors import CftoolsError
from cftools.progress import step_progress
from cftools.evaluate.predictions import READINGS, STRICT
from cftools.evaluate.report import compare_table, rich_tables
from cftools.evaluate.run import MODES, EvalOptions, load_run, run_eval
from cftools.evaluate.shards import Shard, is_main_process, launched_processes, parse_shard
from cftools.evaluate.vlm import DEVICES, DTYPES, SCORES


class EvalGroup(click.Group):
    """`cftools eval RELEASE ...` runs an evaluation; `cftools eval merge RUN` merges a split one; `cftools eval
    compare A B` compares two runs.

    `eval` is a group so that `compare` can be a subcommand, and `run` is its default: arguments that do not
    start with a subcommand's name go to `run`. Its help shows `run`'s options, since `cftools eval RELEASE
    --model SPEC` is how people call it.
    """

    default_command = "run"

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage(ctx.command_path, "RELEASE --model SPEC [OPTIONS]")
        formatter.write_usage(ctx.command_path, "merge RUN_DIR [--partial]", prefix="   or: ")
        formatter.write_usage(ctx.command_path, "compare RUN_A RUN_B", prefix="   or: ")
        formatter.write_usage(ctx.command_path, "import RELEASE FILE... --out RUN_DIR", prefix="   or: ")

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        run = self.commands[self.default_command]
        run.format_options(click.Context(run, info_name=self.default_command, parent=ctx), formatter)
        self.format_commands(ctx, formatter)


@click.group("eval", cls=EvalGroup)
def eval_group() -> None:
    """Score a model on a release: `cftools eval RELEASE --model SPEC [options]`.

    Asks both questions of every item of RELEASE and prints the report table; `cftools eval run` is the
    same command. Split between processes: `accelerate launch -m cftools eval RELEASE --model SPEC`, or
    `--shard I/N` per process and then `cftools eval merge RUN_DIR`. `cftools eval compare RUN_A RUN_B` puts
    two run folders side by side. `cftools eval import RELEASE FILE... --out RUN_DIR` scores lmms-eval's or
    VLMEvalKit's predictions on the release's exports as cftools does.
    """


def parse_batch_size(text: Optional[str]) -> int | str | None:
    if text is None or text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a number or auto", param_hint="--batch-size") from None


def parse_shard_option(ctx: click.Context, param: click.Parameter, text: Optional[str]) -> Optional[Shard]:
    try:
        return parse_shard(text) if text is not None else None
    except CftoolsError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


@eval_group.command("run")
@click.argument("release", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--model", "model", required=True,
              help="hf:PATH_OR_ID (transformers image-text-to-text), openai:MODEL (vision chat API), "
                   "blind (embedded text-only model, no image) or blind:BACKEND:MODEL.")
@click.option("--mode", type=click.Choice(MODES), default=None,
              help="generate short answers, or rank the options by likelihood (hf: models, blind). Default: the "
                   "paper's method for the release's kind: rank for CFMM, generate for C-VQA and MuCR (and when the "
                   "model cannot rank).")
@click.option("--score", type=click.Choice(SCORES), default="mean-loss", show_default=True,
              help="rank mode: mean-loss (mean token loss, lowest wins) or sum-logprob (highest wins).")
@click.option("--batch-size", default=None,
              help="Questions per batch, or auto: start at 64 and halve on every out-of-memory error (the run goes on; "
                   "predictions already written stay). Default: auto for hf: models on CUDA, else 8.")
@click.option("--device", type=click.Choice(DEVICES), default="auto", show_default=True,
              help="hf: models: cuda when there is a GPU, else cpu.")
@click.option("--dtype", type=click.Choice(DTYPES), default="auto", show_default=True,
              help="hf: models: auto = bf16 (fp16 without bf16 support) on CUDA, fp32 on CPU.")
@click.option("--limit", type=int, help="Evaluate only the first N items of the release that have a question for "
                                       "the model (items it cannot be asked are passed over).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Run folder (default: WORKSPACE/runs/NAME, or ./runs/NAME without a workspace).")
@click.option("--template", help="Prompt template: a packaged name (short_answer) or a .j2 file.")
@click.option("--max-new-tokens", type=int, default=16, show_default=True, help="Answer length limit (generate).")
@click.option("--judge", help="MuCR Exp judge, BACKEND[:MODEL] of cftools' LLM backends (e.g. local, openai:gpt-4o).")
@click.option("--judge-aggregate", type=click.Choice(["best-match", "mean"]), default="best-match", show_default=True,
              help="A judged answer with several references (MuCR Exp): the best-matching reference's score per "
                   "part, or the mean over the references.")
@click.option("--concurrency", type=int, default=4, show_default=True, help="API models: requests in flight.")
@click.option("--allow-downloads", is_flag=True,
              help="hf: models: let an id that is not in the local cache be downloaded (off: offline).")
@click.option("--prompt", "prompt_variant", default="plain", show_default=True,
              help="Prompt variant of the kind (cfmm: plain, icl1 = one in-context example, cot1 = one example with "
                   "its reasoning; added to the counterfactual question only, as in the CFMM paper).")
@click.option("--swap-options", is_flag=True,
              help="Ask every question with options twice, options swapped, and report the position bias.")
@click.option("--reading", type=click.Choice(READINGS), default=STRICT, show_default=True,
              help="How replies are read: strict (cftools' reading: hedges, two candidates and negative counts are "
                   "unknown) or paper (as each paper's own scripts read them, to reproduce its table: C-VQA's "
                   "format_response.py + calc_acc.py; other kinds keep the strict reading), vlmevalkit or "
                   "lmms-eval (as those harnesses' own scorers read yes/no and multiple-choice replies; other "
                   "questions keep the strict reading). The report lists where the readings differ and puts "
                   "cftools' scores beside them.")
@click.option("--shard", callback=parse_shard_option, metavar="I/N",
              help="Ask only shard I of N of the questions (I counted from 1), into the run folder's "
                   "predictions.shard-I-of-N.jsonl, and write no report; once all N have run, `cftools eval merge "
                   "RUN_DIR` makes the run. Not for `accelerate launch`, whose processes split the questions themselves.")
@click.option("--no-verify", "no_verify", is_flag=True,
              help="Score the release even if its files do not match its manifest (`cftools verify` fails); the "
                   "report says it was not verified. By default such a release is refused.")
@click.option("--quiet", is_flag=True, help="No progress lines on stderr (the questions, the model's load).")
@click.option("--compile/--no-compile", "compile_decoding", default=None,
              help="hf: models, generate: decode on a static KV cache that transformers compiles on a GPU, prompts "
                   "padded to a multiple of 64 tokens (each new shape compiles once, ~35-50 s on an H200). Default: "
                   "off, unless CFTOOLS_COMPILE=1.")
@ray_option()
@click.pass_context
def eval_run(ctx: click.Context, release: Path, model: str, mode: str, score: str, batch_size: str, device: str,
             dtype: str, limit: Optional[int], out_dir: Optional[Path], template: Optional[str],
             max_new_tokens: int, judge: Optional[str], judge_aggregate: str, concurrency: int,
             allow_downloads: bool, prompt_variant: str, swap_options: bool, reading: str, shard: Optional[Shard],
             no_verify: bool, quiet: bool, ray_address: Optional[str], compile_decoding: Optional[bool],
             **kind_options: Any) -> None:
    """Ask both questions of every item of RELEASE and print the report table.

    RELEASE is verified first (every file against its manifest) and refused when it fails, unless --no-verify.
    Exit codes: 0 done; 1 error or interrupted; 2 bad usage; 3 some model calls failed (the answers before them
    are stored: rerun to ask the rest); 4 every model call failed (nothing new stored)."""
    workspace = optional_workspace(ctx)
    launched = launched_processes() > 1
    if launched and shard is not None:
        raise click.UsageError("--shard is for processes started by hand: under accelerate launch (or torchrun) "
                               "the processes split the questions by themselves")
    # only the first process of a launch draws: the others' lines would overwrite its own
    with step_progress(err_console, quiet=quiet or not is_main_process()) as shown:

        def progress(done: int, total: int) -> None:
            shown("questions", done, total)

        options = EvalOptions(mode=mode, score=score, batch_size=parse_batch_size(batch_size), device=device,
                              dtype=dtype, limit=limit, out_dir=out_dir, template=template,
                              max_new_tokens=max_new_tokens, judge=judge, judge_aggregate=judge_aggregate,
                              concurrency=concurrency, allow_downloads=allow_downloads, prompt_variant=prompt_variant,
                              swap_options=swap_options, kind_options=kind_options, shard=shard,
                              verify=not no_verify, reading=reading, compile=compile_decoding)
        hooks = dict(workspace=workspace, progress=progress, waiting=shown.waiting,
                     notify=lambda note: err_console.print(f"[yellow]{escape(note)}[/]"))
        address = ray_address_of(ctx, ray_address)
        if address is not None:
            if launched or shard is not None:
                raise click.UsageError("--ray splits the questions between the cluster's workers: not with --shard "
                                       "or accelerate launch")
            options = replace(options, ray=address,
                              ray_config=workspace.section("ray") if workspace is not None else None)
        if launched:
            from cftools.evaluate.merge import run_launched

            result = run_launched(release, model, options=options, **hooks)
        else:
            result = run_eval(release, model, options=options, **hooks)
    if result is None:  # not the first process of a launch: the first one merges and prints
        return
    print_lines(RUN_LINES, result, console, err_console, shard=shard)


RUN_FILES = "(config.json, predictions.jsonl, report.md, report.csv, report.png)"


def report_tables(summary: dict[str, Any], shown: Mapping[str, Any]) -> list[Any]:
    """The report for the terminal: its header and one table per item shape."""
    return rich_tables(shown["report"].config, summary, width=console.width)


def shard_done(asked: int, shown: Mapping[str, Any]) -> str:
    result, shard = shown["report"], shown["shard"]
    return (f"{shard}: {asked} questions asked now, {len(result.predictions)} of its share answered; run folder "
            f"[bold]{result.out_dir}[/] ({shard.predictions_name}). When all {shard.count} shards have run: "
            f"cftools eval merge {result.out_dir}")


RESULT_TABLES = Line("summary", report_tables, when=always)
RUN_LINES = (
    Line("asked", shard_done, when=lambda _, shown: shown["shard"] is not None, stop=True),
    RESULT_TABLES,
    Line("asked", f"{{value}} questions asked now; run folder [bold]{{report.out_dir}}[/] {RUN_FILES}", when=always),
)
MERGE_LINES = (
    RESULT_TABLES,
    Line("predictions", lambda predictions, shown: f"{len(predictions)} predictions merged"
                                                   f"{' (partial)' if shown['partial'] else ''}; run folder "
                                                   f"[bold]{shown['report'].out_dir}[/] {RUN_FILES}", when=always),
)
IMPORT_LINES = (
    RESULT_TABLES,
    Line("predictions", lambda predictions, shown: f"{len(predictions)} predictions imported from "
                                                   f"{len(shown['files'])} files; run folder "
                                                   f"[bold]{shown['report'].out_dir}[/] {RUN_FILES}", when=always),
)


@eval_group.command("merge")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--partial", is_flag=True,
              help="Merge what the shards have answered so far, even if some have not run or not finished "
                   "(the shard files stay, to finish and merge again).")
@click.pass_context
def eval_merge(ctx: click.Context, run_dir: Path, partial: bool) -> None:
    """Merge the shards of a split run (`--shard I/N`) into RUN_DIR's predictions.jsonl and reports.

    Checks that the shards belong to the run and that every one has answered its whole share; merging again
    gives the same result.
    """
    from cftools.evaluate.merge import merge_run

    result = merge_run(run_dir, workspace=optional_workspace(ctx), partial=partial)
    print_lines(MERGE_LINES, result, console, err_console, partial=partial)


@eval_group.command("import")
@click.argument("release", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Run folder to write (config.json, predictions.jsonl, report.md, report.csv, report.png).")
@click.option("--model", "model", default="imported", show_default=True,
              help="The model's name, as the report shows it.")
@click.option("--reading", type=click.Choice(READINGS), default=STRICT, show_default=True,
              help="How replies are read: strict (cftools), paper (each paper's own scripts), vlmevalkit or "
                   "lmms-eval (as the harness's own scorers read yes/no and multiple-choice replies, to put its "
                   "numbers beside cftools'; the report shows both scores side by side).")
@click.option("--no-verify", "no_verify", is_flag=True,
              help="Score the release even if its files do not match its manifest or its manifest is not the one "
                   "the store recorded; the report says it was not verified. By default such a release is refused.")
@click.pass_context
def eval_import(ctx: click.Context, release: Path, files: tuple[Path, ...], out_dir: Path, model: str,
                reading: str, no_verify: bool) -> None:
    """Score a harness's predictions on RELEASE with the kinds' own metrics, into an ordinary run folder.

    FILES: lmms-eval's --log_samples files (*_samples_TASK.jsonl) of the `--format lmms-eval` export, or
    VLMEvalKit's prediction files (MODEL_DATASET.xlsx, .tsv, .csv, .json) of the `--format vlmevalkit` export.
    RELEASE is the exported folder (or any release holding the same records)."""
    from cftools.evaluate.harness_import import import_predictions

    result = import_predictions(release, files, out_dir, model=model, reading=reading,
                                workspace=optional_workspace(ctx), verify=not no_verify)
    print_lines(IMPORT_LINES, result, console, err_console, files=files)


@eval_group.command("compare")
@click.argument("run_a", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("run_b", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--resamples", type=click.IntRange(min=100), default=2000, show_default=True,
              help="Resamples of the paired bootstrap clustered by image.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the paired bootstrap.")
@click.option("--json", "as_json", is_flag=True, help="Print the paired test as JSON (no table).")
def eval_compare(run_a: Path, run_b: Path, resamples: int, seed: int, as_json: bool) -> None:
    """Put two run folders side by side: every metric, A, B and the difference; then the paired test of the
    questions both answered (McNemar, the clustered McNemar, a bootstrap clustered by image), overall and per kind,
    and whether the difference is within the smallest one the release can detect (80% power, alpha 0.05)."""
    from rich.table import Table

    from cftools.commands.common import print_json
    from cftools.evaluate.compare import PAIRED_COLUMNS, compare_runs, paired_rows

    a, b = load_run(run_a), load_run(run_b)
    comparison = compare_runs(a, b, resamples=resamples, seed=seed)
    if as_json:
        print_json(comparison)
        return
    console.print(compare_table(a, b))
    table = Table(title=f"Paired test of the {comparison['shared']} questions both runs answered (points; clustered "
                        f"by {escape(comparison['clustered_by'])}; MDD: the smallest difference detected with 80% "
                        "power at alpha 0.05)", title_justify="left")
    for i, column in enumerate(PAIRED_COLUMNS):
        table.add_column(column, justify="left" if i in (0, len(PAIRED_COLUMNS) - 1) else "right")
    for row in paired_rows(comparison):
        table.add_row(*(escape(cell) for cell in row))
    console.print(table)
