"""The `autotune` command line: parse flags, build a config, call a library function.

Expected failures (``AutotuneError``) print one clear message to stderr and exit non-zero; no
traceback reaches the user for them. Heavy modules are imported inside commands so that
``autotune --help`` stays fast.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import click

from autotune import __version__
from autotune.cli._common import (
    DURATION,
    F,
    _db_option,
    _endpoint_options,
    _format_option,
    _Group,
    _open_store,
    _wide_option,
)
from autotune.cli.plan import plan as plan_command
from autotune.cli.sim import sim as sim_group

DEFAULT_STATE_FILE = Path("storage/daemon.json")


@click.group(cls=_Group,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="autotune")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
def cli(verbose: int) -> None:
    """Tune speculative decoding and batching for vLLM from samples of production traffic.

    \b
    Example:
      autotune start --traffic examples/sample.jsonl --once
      autotune recommendations
      autotune export --workload code -o code.json
    """
    level = logging.WARNING - 10 * verbose
    logging.basicConfig(level=max(level, logging.DEBUG),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _ray_address(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None or value == "auto":
        return value
    host, sep, port = value.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise click.BadParameter(f"{value!r} is not a Ray address; use auto (the cluster "
                                 "`ray start` runs on this machine) or HOST:PORT, e.g. "
                                 "10.0.0.1:6379")
    return value


# ---------------------------------------------------------------------------------- start
def _tuning_flags(f: F) -> F:
    """Flags every tuning command shares (start, nightly)."""
    for option in reversed([
        click.option("--policy", "policy_path", type=click.Path(path_type=Path), default=None,
                     help="Tuning policy YAML (default: the embedded policies/default.yaml)."),
        click.option("--backend", type=click.Choice(["sim", "vllm"]), default="sim",
                     show_default=True,
                     help="sim: embedded simulator; vllm: real vllm serve replicas."),
        _db_option,
        click.option("--budget-trials", type=click.IntRange(min=1), default=None,
                     help="Trials per workload (overrides the policy's budget.trials)."),
        click.option("--seed", type=int, default=0, show_default=True,
                     help="Seed of search and replay."),
        click.option("--skip-invalid", is_flag=True,
                     help="Skip invalid sample lines (and say how many)."),
        click.option("--export-dir", type=click.Path(path_type=Path),
                     default=Path("storage/exports"), show_default=True,
                     help="Where the speculative-config exports are written."),
        click.option("--replicas", type=click.IntRange(min=1), default=None, metavar="N",
                     help="Replicas running trials in parallel (default: sim, the local cores; "
                          "vllm, or sim with policy sim.reserve_gpus, as many as the Ray cluster "
                          "holds). 1 sim replica without "
                          "--ray-address runs in this process, without Ray."),
        click.option("--ray-address", default=None, metavar="auto|HOST:PORT",
                     callback=_ray_address,
                     help="Join this Ray cluster (see docs/ray.md); default: $RAY_ADDRESS, "
                          "else a local Ray started and stopped with the pass."),
    ]):
        f = option(f)
    return f


@cli.command()
@click.option("--traffic", "traffic", required=True, type=click.Path(path_type=Path),
              help="Traffic sample (JSON Lines, optionally .gz).")
@click.option("--once", is_flag=True, help="One pass, then exit (CI, cron).")
@_tuning_flags
@click.option("--endpoint", default=None, metavar="URL",
              help="vllm backend: measure this already-running server (no restarts).")
@click.option("--every", type=DURATION, default=None, metavar="DURATION",
              help="Daemon: re-tune this often (5s, 30m, 24h), instead of the policy's cron.")
@click.option("--state-file", type=click.Path(path_type=Path), default=DEFAULT_STATE_FILE,
              show_default=True, help="Daemon: where it records its state (autotune status).")
@_wide_option
def start(traffic: Path, once: bool, endpoint: str | None, every: float | None,
          state_file: Path, db: str | None, wide: bool, **flags: Any) -> None:
    """Tune every workload of a traffic sample, store and export the recommendations.

    Without --once it keeps running: it re-tunes when the policy's schedule.cron fires (or
    every --every), or when the traffic file changes, and then only the workloads whose traffic
    drifted. SIGTERM, SIGINT (Ctrl-C) or SIGHUP stops it cleanly at any moment (exit 0; --once
    exits 130); a run stopped mid-way is resumed by the next start with the same inputs.

    \b
    Example:
      autotune start --traffic examples/sample.jsonl --once
      autotune start --traffic sample.jsonl --policy policies/latency.yaml --budget-trials 8
      autotune start --traffic /data/traffic.jsonl --every 30m
    """
    from autotune.daemon import DaemonOptions, run_daemon, run_pass, tuning_lease
    from autotune.orchestrate.signals import stop_signals
    from autotune.orchestrate.tuning import check_output_subset, load_traffic
    from autotune.ui import RichReporter, err, print_pass

    with stop_signals():
        try:
            options = _tune_options(traffic, endpoint=endpoint, **flags)
            # A bad sample stops --once here, before the database is created or written.
            sample = load_traffic(options) if once else None
            if sample is not None:
                check_output_subset(options, sample)
            store = _open_store(db)
            if not once:
                daemon = DaemonOptions(tune=options, every_s=every,
                                       cron=options.policy.schedule.cron, state_path=state_file)
                code = run_daemon(daemon, store, RichReporter,
                                  on_pass=lambda r, why: print_pass(r, options.policy, why,
                                                                    wide=wide))
                sys.exit(code)
            with tuning_lease(store, traffic, "start"), RichReporter() as reporter:
                result = run_pass(options, store, reporter, sample=sample)
        except KeyboardInterrupt:
            if not once:  # stopped before the daemon's loop began
                sys.exit(0)
            err.print("interrupted: the run is marked interrupted; the same `autotune start` "
                      "resumes it without repeating finished trials")
            sys.exit(130)
    print_pass(result, options.policy, None, wide=wide)


def _tune_options(traffic: Path, *, policy_path: Path | None, backend: str,
                  budget_trials: int | None, seed: int, skip_invalid: bool, export_dir: Path,
                  replicas: int | None, ray_address: str | None,
                  endpoint: str | None = None) -> Any:
    from autotune.orchestrate import TuneOptions
    from autotune.policy import load_policy

    overrides = {"budget.trials": budget_trials} if budget_trials else {}
    policy = load_policy(policy_path, overrides)
    backend_options = _endpoint_options(endpoint, backend) if endpoint else {}
    options = TuneOptions(traffic=traffic, policy=policy, backend=backend,
                          backend_options=backend_options, seed=seed, skip_invalid=skip_invalid,
                          export_dir=export_dir, replicas=replicas, ray_address=ray_address)
    # A cluster the pass would join (--ray-address, or $RAY_ADDRESS when it runs on Ray) that is
    # not there, or refuses this machine's token, stops the command here, before the database
    # is created or written.
    from autotune.orchestrate.ray_join import check_cluster
    from autotune.orchestrate.ray_pool import cluster_to_join
    from autotune.orchestrate.tuning import ray_settings

    joining = cluster_to_join(ray_settings(options))
    if joining is not None:
        check_cluster(*joining)
    return options


# -------------------------------------------------------------------------------- traffic
@cli.group(cls=_Group)
def traffic() -> None:
    """Look at and convert traffic samples."""


@traffic.command("inspect")
@click.argument("sample", type=click.Path(path_type=Path))
@_format_option
@click.option("--skip-invalid", is_flag=True, help="Skip invalid lines (and say how many).")
@click.option("--group/--no-group", default=True, show_default=True,
              help="Group unlabelled requests into workloads as `start` would.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the grouping.")
@click.option("--policy", "policy_path", type=click.Path(path_type=Path), default=None,
              help="Validate as `start --policy FILE` would: acceptance lists against its "
                   "draft block size, prompt + output tokens against its serve.max_model_len.")
@click.option("--max-model-len", type=click.IntRange(min=1), default=None, metavar="TOKENS",
              help="Requests whose prompt + output tokens exceed this are invalid lines "
                   "(default: the --policy's serve.max_model_len, else no limit).")
@_wide_option
def traffic_inspect(sample: Path, fmt: str, skip_invalid: bool, group: bool, seed: int,
                    policy_path: Path | None, max_model_len: int | None, wide: bool) -> None:
    """Per workload: requests, token quantiles, arrival rate, burstiness, acceptance.

    Requests without a workload label are grouped automatically (as `start` does) and the
    groups are described: how many, by which criterion, and their names.

    \b
    Example:
      autotune traffic inspect examples/sample.jsonl --format json
      autotune traffic inspect sample.jsonl --policy policies/latency.yaml --skip-invalid
    """
    from autotune.traffic import read_sample
    from autotune.traffic.columns import collect_columns
    from autotune.traffic.grouping import group_columns
    from autotune.traffic.summary import summarize_columns
    from autotune.ui import err, inspect_table, print_json, print_table

    max_acceptance = 64
    if policy_path is not None:
        from autotune.policy import load_policy

        serve = load_policy(policy_path).serve
        max_acceptance = serve.draft_block_size
        max_model_len = max_model_len or serve.max_model_len
    reader = read_sample(sample, skip_invalid=skip_invalid, max_acceptance=max_acceptance,
                         max_model_len=max_model_len)
    columns = collect_columns(reader)  # one pass; ~100 bytes a request
    if group and (columns.workload < 0).any():
        grouping = group_columns(columns, seed)
        columns = grouping.columns
        err.print(f"unlabelled requests grouped automatically: {grouping.k} group(s) "
                  "(lengths, then acceptance; docs/traffic.md)")
    rows = [s.as_dict() for s in summarize_columns(columns)]
    if reader.skipped:
        too_long = (f" ({reader.too_long} longer than max_model_len {max_model_len})"
                    if reader.too_long else "")
        err.print(f"skipped {reader.skipped} invalid lines of {sample}{too_long}")
        for e in reader.errors[:5]:
            err.print(f"  {e}", style="yellow")
    if fmt == "json":
        print_json(rows)
    else:
        print_table(inspect_table(rows, wide=wide), wide=wide)


_PROMPTS_HELP = ("JSONL prompt set (repeatable) whose real texts are attached by nearest length "
                 "to requests without text, e.g. ../shared/data/prompts/gsm8k_test.jsonl; "
                 "prompt_tokens stay the trace's.")


@traffic.command("import")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--format", "fmt", required=True, metavar="FORMAT",
              help="Input format: azure, mooncake, openai-log or vllm-bench.")
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True,
              help="Sample to write (JSONL; .gz compresses). Written whole or not at all.")
@click.option("--workload", default=None, metavar="LABEL",
              help="Label every request with this workload (else grouped automatically).")
@click.option("--prompts", "prompts", multiple=True, type=click.Path(path_type=Path),
              help=_PROMPTS_HELP)
@click.option("--prompt-fit/--no-prompt-fit", default=True, show_default=True,
              help="Cut or extend attached texts to the trace's length (else whole texts).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the prompt picks.")
@click.option("--skip-invalid", is_flag=True, help="Skip invalid rows (and say how many).")
def traffic_import(file: Path, fmt: str, output: Path, workload: str | None,
                   prompts: tuple[Path, ...], prompt_fit: bool, seed: int,
                   skip_invalid: bool) -> None:
    """Convert a trace or request log into a traffic sample.

    \b
    Example:
      autotune traffic import --format azure \\
          ../shared/data/azure_llm_2023/AzureLLMInferenceTrace_code.csv -o code.jsonl \\
          --workload code --prompts ../shared/data/prompts/humaneval.jsonl
    """
    from autotune.traffic.importers import import_traffic
    from autotune.traffic.importers.report import print_report

    print_report(import_traffic(fmt, file, output, workload=workload, prompts=prompts,
                                skip_invalid=skip_invalid, seed=seed, fit_prompts=prompt_fit))


@traffic.command("export")
@click.argument("sample", type=click.Path(path_type=Path))
@click.option("--format", "fmt", required=True, metavar="FORMAT",
              help="Output format: vllm-bench (what vllm bench serve --dataset-name custom "
                   "reads).")
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True,
              help="File to write (written whole or not at all).")
@click.option("--prompts", "prompts", multiple=True, type=click.Path(path_type=Path),
              help=_PROMPTS_HELP)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the prompt picks.")
@click.option("--skip-invalid", is_flag=True, help="Skip invalid sample lines.")
def traffic_export(sample: Path, fmt: str, output: Path, prompts: tuple[Path, ...], seed: int,
                   skip_invalid: bool) -> None:
    """Write a traffic sample in another tool's format.

    \b
    Example:
      autotune traffic export --format vllm-bench examples/sample.jsonl -o bench.jsonl
      vllm bench serve --dataset-name custom --dataset-path bench.jsonl ...
    """
    from autotune.traffic.importers import export_traffic
    from autotune.traffic.importers.report import print_report

    print_report(export_traffic(fmt, sample, output, prompts=prompts, skip_invalid=skip_invalid,
                                seed=seed))


# --------------------------------------------------------------------- runs, trials, recs
@cli.command()
@_db_option
@_format_option
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Newest N runs only.")
@_wide_option
def runs(db: str | None, fmt: str, limit: int | None, wide: bool) -> None:
    """What ran: one row per run, newest first.

    \b
    Example:
      autotune runs --format json
    """
    from autotune.ui import print_json, print_table, runs_table

    rows = _open_store(db, read_only=True).runs(limit)
    print_json(rows) if fmt == "json" else print_table(*runs_table(rows, wide=wide), wide=wide)


@cli.command()
@click.option("--run", "run_id", default=None, help="Only this run's trials.")
@click.option("--workload", default=None, help="Only this workload's trials.")
@_db_option
@_format_option
@_wide_option
def trials(run_id: str | None, workload: str | None, db: str | None, fmt: str,
           wide: bool) -> None:
    """Each trial: its config, state, measurements and errors.

    \b
    Example:
      autotune trials --run 20261129-151003-3fa2 --workload code
    """
    from autotune.ui import print_json, print_table, trials_table

    store = _open_store(db, read_only=True)
    if run_id:
        store.run(run_id)  # clear error for an unknown run
    rows = store.trials(run_id, workload)
    print_json(rows) if fmt == "json" else print_table(*trials_table(rows, wide=wide),
                                                       wide=wide)


@cli.command()
@click.option("--workload", default=None, help="Only this workload.")
@click.option("--history", is_flag=True, help="Every recommendation, not just the active ones.")
@_db_option
@_format_option
@_wide_option
def recommendations(workload: str | None, history: bool, db: str | None, fmt: str,
                    wide: bool) -> None:
    """Per workload, the active recommendation; a workload without one shows its newest
    result (infeasible, candidate, or failed) and why. With --history: every recommendation.

    \b
    Example:
      autotune recommendations --workload code --history
    """
    from autotune.ui import print_json, print_table, recommendations_table
    from autotune.ui.lineage import lineage_table

    store = _open_store(db, read_only=True)
    if history:
        rows = store.recommendations(workload, history=True)
        print_json(rows) if fmt == "json" else print_table(*lineage_table(rows, wide=wide),
                                                           wide=wide)
        return
    statuses = store.workload_statuses(workload)
    if fmt == "json":
        print_json(statuses)
        return
    table, notes = recommendations_table(statuses, wide=wide)
    if not statuses:
        notes.append((f"no result for workload {workload!r} yet" if workload else
                      "no result yet") + "; run: autotune start --traffic SAMPLE --once")
    print_table(table, notes, wide=wide)


@cli.command()
@click.option("--workload", default=None,
              help="Workload whose active recommendation to export (every format but "
                   "production-stack, which covers every workload of a run's plan).")
@click.option("--format", "fmt", type=click.Choice(["speculative-config", "vllm-args",
                                                     "schedule", "production-stack"]),
              default="speculative-config", show_default=True,
              help="speculative-config JSON, the full vllm serve flags (with the plan's "
                   "replica count), a window schedule, or production-stack Helm values.")
@click.option("--run", "run_id", default=None,
              help="production-stack: the run whose plan to deploy (default: the newest "
                   "finished run).")
@click.option("-o", "--output", type=click.Path(path_type=Path), default=None,
              help="Write to this file (atomically) instead of stdout.")
@click.option("--force", is_flag=True,
              help="Export even when the workload's newest result is infeasible or its "
                   "outputs are flagged.")
@_db_option
def export(workload: str | None, fmt: str, run_id: str | None, output: Path | None,
           force: bool, db: str | None) -> None:
    """Export the active recommendation exactly as `vllm serve` takes it.

    A workload whose newest result is infeasible (no config measured serves its traffic within
    the SLO), or whose outputs differ from the baseline's beyond the engine's numerics
    (flagged, docs/outputs.md), is refused with the reason, unless --force, or (infeasible
    only) unless its run's capacity plan gives it the replicas it needs. Which vLLM build the
    keys need is said on stderr (and in a comment line of --format vllm-args, with the plan's
    replica count).

    \b
    Example:
      autotune export --workload code --format vllm-args
      autotune export --format production-stack -o values.yaml   # helm install -f values.yaml
      vllm serve moonshotai/Kimi-K2.6 --speculative-config "$(autotune export --workload code)"
    """
    from autotune.cli.plan import export_production_stack, pick_exported
    from autotune.export import (
        outputs_flagged,
        outputs_reason,
        render,
        requirements_note,
        schedule_note,
        speculative_config,
        write_atomic,
    )

    store = _open_store(db, read_only=True)
    if fmt == "production-stack":
        if workload is not None:
            raise click.BadParameter("production-stack values cover every workload of a "
                                     "run's plan; leave out --workload (--run picks the run)",
                                     param_hint="--workload")
        text = export_production_stack(store, run_id)
    else:
        if workload is None:
            raise click.BadParameter(f"--format {fmt} exports one workload's recommendation: "
                                     "give --workload", param_hint="--workload")
        rec, deployment = pick_exported(store, workload, force=force,
                                        with_plan=fmt == "vllm-args")
        if outputs_flagged(rec):
            click.echo(f"warning: exporting #{rec.id}, whose outputs are flagged (--force): "
                       f"{outputs_reason(rec)}", err=True)
        text = render(rec, fmt, deployment)
        note = schedule_note(rec) if fmt == "schedule" else None
        if note:
            click.echo(f"note: {note}", err=True)
        if fmt != "vllm-args":
            click.echo(f"note: {requirements_note(rec, speculative_config(rec))}", err=True)
    if output is None:
        sys.stdout.write(text)
    else:
        write_atomic(output, text)
        click.echo(f"wrote {output}", err=True)


@cli.command()
@click.option("--run", "run_id", default=None, help="Run to report (default: the newest "
                                                    "finished run).")
@_db_option
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True,
              help="HTML file to write (atomically; self-contained).")
def report(run_id: str | None, db: str | None, output: Path) -> None:
    """Write an HTML report of a run: speedup vs window, Pareto front, calibration, history.

    One self-contained file (plotly.js inlined): open it from disk, no network needed.

    \b
    Example:
      autotune report -o report.html
      autotune report --run 20261129-151003-3fa2 --db sqlite:////tmp/x.db -o run.html
    """
    from autotune.report import write_report

    done = write_report(_open_store(db, read_only=True), output, run_id)
    click.echo(f"wrote {done.path} (run {done.run_id}: {done.workloads} workloads, "
               f"{done.trials} trials, {done.size_bytes / 1e6:.1f} MB)", err=True)


@cli.command()
@click.option("--state-file", type=click.Path(path_type=Path), default=DEFAULT_STATE_FILE,
              show_default=True, help="The daemon's state file.")
@_db_option
@_format_option
@click.option("--check", is_flag=True,
              help="Exit 1 unless a daemon is running (for health checks).")
def status(state_file: Path, db: str | None, fmt: str, check: bool) -> None:
    """The daemon's state: who holds the lease on each traffic (host, pid, since), current
    run, last finished run, next pass, active recommendations.

    \b
    Example:
      autotune status
      autotune status --check   # HEALTHCHECK: exit 1 when no daemon runs
    """
    from autotune.daemon import read_daemon_state
    from autotune.store import leases
    from autotune.store.models import utcnow
    from autotune.ui import print_json, print_status

    state = read_daemon_state(state_file)
    store = _open_store(db, read_only=True)
    runs = store.runs()
    current = [r for r in runs if r.status == "running"]
    last = next((r for r in runs if r.status == "finished"), None)
    recs = store.recommendations()
    held = leases(store)
    now = utcnow()
    if fmt == "json":
        print_json([{"daemon": state, "leases": [lease.to_json(now) for lease in held],
                     "current_runs": current, "last_finished_run": last,
                     "next_pass": state.get("next_pass") if state else None,
                     "active_recommendations": recs}])
    else:
        print_status(state, held, current, last, recs, now)
    if check and not (state and state.get("alive")):
        sys.exit(1)


@cli.command()
@click.option("--traffic-dir", type=click.Path(path_type=Path), required=True,
              help="Folder of samples; the newest is tuned.")
@click.option("--latest", type=click.IntRange(min=1), default=1, show_default=True,
              help="How many of the newest samples to tune.")
@_tuning_flags
def nightly(traffic_dir: Path, latest: int, db: str | None, **flags: Any) -> None:
    """One pass over the newest sample(s) in a folder; prints a JSON summary.

    Workloads whose traffic has not drifted since their active recommendation are skipped;
    a new result replaces the active one only when its gain is significant. Exit 0 when the
    pass ran, non-zero on failure.

    \b
    Example (cron, 02:00 daily):
      0 2 * * * autotune nightly --traffic-dir /data/traffic --db $AUTOTUNE_DB_URL
    """
    from autotune.daemon import run_nightly
    from autotune.orchestrate.signals import stop_signals
    from autotune.ui import err, print_json

    with stop_signals():
        try:
            options = _tune_options(traffic_dir, **flags)
            summary = run_nightly(options, _open_store(db), traffic_dir, latest)
        except KeyboardInterrupt:
            err.print("interrupted: the run is marked interrupted; the next nightly with the "
                      "same sample resumes it without repeating finished trials")
            sys.exit(130)
    print_json(summary)


# ------------------------------------------------------------------------------------- db
@cli.group(cls=_Group)
def db() -> None:
    """The database: schema migrations."""


@db.command("upgrade")
@_db_option
def db_upgrade(db: str | None) -> None:
    """Create or upgrade the database schema to this version's (safe to run again).

    Any command upgrades the embedded SQLite database on first use; run this explicitly for a
    shared PostgreSQL database, before starting daemons of a new version.

    \b
    Example:
      autotune db upgrade --db postgresql+psycopg://autotune@db:5432/autotune
    """
    from autotune.store import upgrade

    click.echo(upgrade(db).message(), err=True)


cli.add_command(sim_group)
cli.add_command(plan_command)


def main() -> None:
    """Entry point (console script ``autotune``)."""
    try:
        cli()
    except BrokenPipeError:  # e.g. `autotune trials | head`
        sys.exit(0)


if __name__ == "__main__":
    main()
