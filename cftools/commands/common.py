"""What every command shares: the workspace from the context, the console, JSON output."""

from __future__ import annotations

import functools
import json
from typing import Any, Callable

import click
from rich.console import Console

from cftools.workspace import Workspace, find_workspace, named_workspace_root

json_option = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


def get_workspace(ctx: click.Context) -> Workspace:
    root = ctx.find_root()
    workspace = root.meta.get("cftools.workspace")
    if workspace is None:
        workspace = find_workspace(root.params.get("workspace"))
        for warning in workspace.config_warnings:
            click.secho(f"Warning: {warning}", fg="yellow", err=True)
        root.meta["cftools.workspace"] = workspace
        root.call_on_close(workspace.close)
    return workspace


def optional_workspace(ctx: click.Context) -> Workspace | None:
    """The workspace when there is one (eval, preflight and the like also work on a release folder alone). One that
    is named (--workspace, $CFTOOLS_WORKSPACE, a cftools.toml here) but cannot be read is an error, never taken for
    none: eval would send an API model's requests elsewhere than its [llm] base_url, and verify would not know the
    workspace's people and folders."""
    root = ctx.find_root()
    if root.meta.get("cftools.workspace") is None and not workspace_named(root.params.get("workspace")):
        return None
    return get_workspace(ctx)


def workspace_named(explicit: Any) -> bool:
    """A workspace is asked for: --workspace, $CFTOOLS_WORKSPACE, or a cftools.toml in the current folder."""
    return named_workspace_root(explicit) is not None


def release_boundary(ctx: click.Context) -> Any:
    """The boundary a release folder is scanned with: the workspace's (its people, its folders) when there is one."""
    from cftools.boundary import outside_boundary, workspace_boundary

    workspace = optional_workspace(ctx)
    return workspace_boundary(workspace) if workspace is not None else outside_boundary()


def pass_workspace(func: Callable) -> Callable:
    """Give the command the workspace found from --workspace, $CFTOOLS_WORKSPACE or the current folder."""

    @click.pass_context
    @functools.wraps(func)
    def wrapper(ctx: click.Context, *args: Any, **kwargs: Any) -> Any:
        return ctx.invoke(func, get_workspace(ctx), *args, **kwargs)

    return wrapper


def print_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, ensure_ascii=False, default=str))


RAY_HELP = ("Run the work on a Ray cluster: ADDRESS (ray://HOST:10001, HOST:6379 or auto), or none for this "
            "machine's cluster (a new local one when there is none); this process alone reads and writes the store "
            "(needs cftools[ray]; see docs/ray.md).")


def ray_option(*, expose: bool = True, keep: Callable | None = None, name: str = "ray_address") -> Callable:
    """--ray [ADDRESS]: the value `local` when given without an address; None when not given. Without Ray
    installed, giving it is one line naming the extra, before anything else is read."""
    from cftools.distributed import LOCAL, require_ray

    def given(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is not None:
            require_ray()
        return keep(ctx, param, value) if keep is not None else value

    return click.option("--ray", name, is_flag=False, flag_value=LOCAL, default=None, metavar="[ADDRESS]",
                        help=RAY_HELP, expose_value=expose, callback=given)


def ray_address(ctx: click.Context, given: str | None) -> str | None:
    """Where --ray runs the work: its ADDRESS, or without one [ray] address of the workspace, else this machine's
    cluster. None without --ray: the run is here, whatever [ray] says (nothing of [ray] is read without --ray)."""
    from cftools.distributed import LOCAL

    if given != LOCAL:
        return given
    workspace = optional_workspace(ctx)  # none: no [ray] section either; one unreadable: its error
    configured = workspace.section("ray").get("address") if workspace is not None else None
    return configured or LOCAL
