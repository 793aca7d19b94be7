"""``autotune plan``: the capacity plan of a finished run, from the database (no measurement);
and what ``autotune export`` takes from a plan (replica counts, production-stack values)."""

from __future__ import annotations

from typing import Any

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


def pick_exported(store: Any, workload: str, *, force: bool,
                  with_plan: bool) -> tuple[Any, Any]:
    """The recommendation ``export`` writes for ``workload`` and, ``with_plan``, its
    deployment (:func:`autotune.plan.pick_export`); warnings and notes on stderr."""
    from autotune.plan import pick_export

    history = store.recommendations(workload, history=True)
    if not history:
        known = sorted({r.workload for r in store.recommendations(history=True)})
        hint = f"workloads with recommendations: {', '.join(known)}" if known else \
            "no recommendations yet; run: autotune start --traffic SAMPLE --once"
        raise click.BadParameter(f"no recommendation for {workload!r}; {hint}",
                                 param_hint="--workload")
    picked = pick_export(store, history, workload, force=force)
    if picked.warning:
        click.echo(f"warning: {picked.warning}", err=True)
    if not with_plan:
        return picked.rec, None
    if picked.note:
        click.echo(f"note: {picked.note}", err=True)
    return picked.rec, picked.deployment


def export_production_stack(store: Any, run_id: str | None) -> str:
    """The production-stack values of a run's plan (default: the newest finished run)."""
    from autotune.export import production_stack_values
    from autotune.plan import plan_deployments, plan_for_run
    from autotune.report.data import pick_run

    run = pick_run(store, run_id)
    made = plan_for_run(store, run.id)
    deployments, left_out = plan_deployments(store, made)
    for name, why in left_out:
        click.echo(f"note: left out {name!r}: {why}", err=True)
    return production_stack_values(deployments, left_out,
                                   header=f"plan of run {made.run_id}: {made.headline()}")
