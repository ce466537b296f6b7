"""Exit codes a script can trust, shared by every command that makes many requests.

0 everything asked for is done (or there was nothing to do); 1 an error stopped the command (one line on stderr),
or it was interrupted; 2 bad usage (click's own code); 3 partial failure: some requests failed, what succeeded is
stored and a rerun retries the rest; 4 every request failed (a dead endpoint, a wrong model name): nothing new was
stored.
"""

from __future__ import annotations

import click

from cftools.errors import ALL_FAILED, PARTIAL_FAILURE

OK = 0
ERROR = 1
USAGE = 2

EXIT_CODES_HELP = ("Exit codes: 0 all done (or nothing to do); 1 error or interrupted; 2 bad usage; "
                   "3 partial failure (some requests failed, the rest stored; rerun to retry); "
                   "4 every request failed (nothing new stored).")


def failure_exit_code(attempted: int, failed: int) -> int:
    """The code for a run that attempted ATTEMPTED requests of which FAILED failed."""
    if failed <= 0 or attempted <= 0:
        return OK
    return ALL_FAILED if failed >= attempted else PARTIAL_FAILURE


def exit_for_failures(attempted: int, failed: int, what: str) -> None:
    """Leave with code 3 or 4 (and one line on stderr) when requests failed; return when none did."""
    code = failure_exit_code(attempted, failed)
    if code == OK:
        return
    if code == ALL_FAILED:
        click.secho(f"Error: all {failed} {what} failed; nothing new was stored", fg="red", err=True)
    else:
        click.secho(f"Warning: {failed} of {attempted} {what} failed; the rest are stored, rerun to retry",
                    fg="yellow", err=True)
    click.get_current_context().exit(code)


def document_exit_codes(func):  # noqa: ANN001, ANN201
    """Append the exit codes to a command's help (its docstring, which click reads when the command is made)."""
    func.__doc__ = f"{(func.__doc__ or '').rstrip()}\n\n    {EXIT_CODES_HELP}\n"
    return func
