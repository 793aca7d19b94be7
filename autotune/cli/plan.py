"""``autotune plan``: the capacity plan of a finished run, from the database (no measurement)."""

from __future__ import annotations

import click

from autotune.cli._common import DURATION, _db_option


def _growth(ctx: click.Context, param: click.Parameter, value: str | None) -> list[float] | None:
    if value is None:
        return None
    out = []
    for part in value.split(","):
        try:
            out.append(float(part))
        except ValueError:
            raise click.BadParameter(f"{part.strip()!r} is not a number; give growth factors "
                                     "as positive numbers separated by commas, e.g. 1,2,4"
                                     ) from None
    return out


@click.command("plan")
@click.option("--run", "run_id", default=None,
              help="Run to plan from (default: the newest finished run).")
@click.option("--growth", callback=_growth, default=None, metavar="K[,K...]",
              help="Traffic growth factors (default: the policy's plan.growth, 1,2,4).")
@click.option("--headroom", type=float, default=None,
              help="Plan each replica at most at capacity / (1 + headroom) (default: the "
                   "policy's plan.headroom, 0.1).")
@click.option("--peak-window", type=DURATION, default=None,
              help="Plan for the busiest window of this length (default: the policy's "
                   "plan.peak_window: 5m, or the mean of a shorter sample).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True, help="table for people, json for programs (one JSON object).")
@_db_option
def plan(run_id: str | None, growth: list[float] | None, headroom: float | None,
         peak_window: float | None, fmt: str, db: str | None) -> None:
    """Replicas and GPUs per workload for the recommended and the baseline configs.

    From a finished run's capacity readings (nothing is measured): the replicas each workload
    needs at the traffic's peak and its growth, with headroom, the GPUs saved against the
    baseline, the probability the SLO holds, and split by workload against one shared config.

    \b
    Example:
      autotune plan
      autotune plan --run 20261129-151003-3fa2 --growth 1,2,4,8 --format json
    """
    from autotune.cli._common import _open_store
    from autotune.plan import plan_for_run
    from autotune.report.data import pick_run
    from autotune.ui import print_json
    from autotune.ui.plan_table import print_plan

    store = _open_store(db, read_only=True)
    run = pick_run(store, run_id)
    made = plan_for_run(store, run.id, headroom=headroom, growth=growth,
                        peak_window_s=peak_window)
    if fmt == "json":
        print_json(made.as_dict())
    else:
        print_plan(made)
