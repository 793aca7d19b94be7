"""What every command group of the CLI shares: option decorators, parameter types, and the
group class that turns expected failures into one clear line."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from autotune.errors import AutotuneError

F = TypeVar("F", bound=Callable[..., Any])

FORMAT = click.Choice(["table", "json"])


class _Duration(click.ParamType):
    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        from autotune.policy import parse_duration

        try:
            return parse_duration(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


DURATION = _Duration()


def _db_option(f: F) -> F:
    return click.option("--db", "db", metavar="URL", envvar="AUTOTUNE_DB_URL",
                        help="Database URL (env AUTOTUNE_DB_URL; default "
                             "sqlite:///storage/autotune.db).")(f)


def _format_option(f: F) -> F:
    return click.option("--format", "fmt", type=FORMAT, default="table", show_default=True,
                        help="table for people, json for programs (a JSON array on "
                             "stdout).")(f)


class UserError(click.ClickException):
    """An expected failure shown as one line (``error: ...``) with its own exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code  # type: ignore[misc]  # click declares it on the class

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


class _Group(click.Group):
    """Turns AutotuneError raised by any command into a UserError (no traceback)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except AutotuneError as e:
            raise UserError(str(e), e.exit_code) from e


def _open_store(db: str | None, *, read_only: bool = False) -> Any:
    """The database, said on stderr (``database: URL``, password hidden). Read-only commands
    open only a database a pass has written: they never create a file."""
    from autotune.store import Store
    from autotune.store.engine import redact, resolve_url
    from autotune.ui import err

    err.print(f"database: {redact(resolve_url(db))}", soft_wrap=True)
    return Store.open(db, existing=read_only)


def _wide_option(f: F) -> F:
    return click.option("--wide", is_flag=True,
                        help="Every column (the default fits 100 columns).")(f)


def _endpoint_options(endpoint: str, backend: str) -> dict[str, Any]:
    """The backend options of ``--endpoint URL``, checked before anything is opened: the URL
    stays in memory for the client; what is printed (and stored) shows its credentials as
    ``***`` (``autotune.redact``)."""
    from autotune.backends.vllm import normalise_endpoint
    from autotune.redact import redact_url
    from autotune.ui import err

    if backend != "vllm":
        raise click.BadParameter("--endpoint needs --backend vllm", param_hint="--endpoint")
    try:
        normalise_endpoint(endpoint)
    except ValueError as e:
        raise click.BadParameter(f"{redact_url(endpoint)!r}: {e}",
                                 param_hint="--endpoint") from None
    err.print(f"attached to {redact_url(endpoint)}: no restarts, so tuning covers only what "
              "that server was started with")
    return {"endpoint": endpoint}
