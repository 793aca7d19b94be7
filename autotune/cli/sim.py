"""``autotune sim``: the embedded simulator's shipped profiles."""

from __future__ import annotations

import click

from autotune.cli._common import _format_option, _Group


@click.group(cls=_Group)
def sim() -> None:
    """The embedded simulator (docs/simulator.md)."""


@sim.command("profiles")
@_format_option
def sim_profiles(fmt: str) -> None:
    """The shipped simulator profiles: model, hardware, cost law and drafters.

    A policy picks one with sim.profile (a name below, or the path of your own profile YAML,
    documented field by field in docs/simulator.md) and its drafter with sim.drafter.

    \b
    Example:
      autotune sim profiles
      autotune sim profiles --format json
    """
    from autotune.backends.sim import profile_catalog
    from autotune.ui import print_json, print_table
    from autotune.ui.tables import new_table

    rows = profile_catalog()
    if fmt == "json":
        print_json([row.as_dict() for row in rows])
        return
    table = new_table("profile", "model", "hardware", "cost law", "drafters (kind)",
                      fold=("model",))
    for row in rows:
        table.add_row(*row.cells())
    print_table(table)
