"""The report page: one self-contained HTML file (plotly.js inlined, no network at view time).

The page leads with the recommendation table and its provenance, then the charts of
:mod:`autotune.report.figures`. Every text that comes from the database is HTML-escaped; the
chart data is JSON that plotly escapes itself. The file is written atomically.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from autotune import __version__
from autotune.errors import DependencyError
from autotune.export import write_atomic
from autotune.report.data import ReportData, load_report_data
from autotune.report.figures import Chart, build_charts
from autotune.store import RecommendationRecord, Store
from autotune.store.records import iso

__all__ = ["ReportWritten", "render_report", "write_report"]

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2733;
background:#f6f7f9}
main{max-width:1320px;margin:0 auto;padding:18px 28px 40px}
h1{font-size:24px;margin:6px 0 4px}h2{font-size:18px;margin:0 0 4px}
.meta{color:#4a5563;font-size:13px;line-height:1.6;margin:0}
.meta code,td code{background:#eef0f3;padding:1px 4px;border-radius:3px;font-size:12px}
nav{margin:10px 0 0;font-size:13px}nav a{margin-right:14px;color:#2858a8;text-decoration:none}
section{background:#fff;border:1px solid #e2e5ea;border-radius:8px;padding:14px 18px;
margin:16px 0}
.caption{color:#4a5563;font-size:13px;margin:2px 0 6px;max-width:1100px}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:6px 8px;border-bottom:1px solid #e8eaee;vertical-align:top}
th{background:#f1f3f6;font-weight:600}
.scroll{overflow-x:auto}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.status{display:inline-block;padding:1px 7px;border-radius:9px;font-size:12px;color:#fff}
.active{background:#2e8b57}.candidate{background:#b7791f}.retired{background:#7a828c}
td.reason{min-width:200px}
.bad{color:#b03a2e}.ok{color:#2e8b57}
details{margin:2px 0}summary{cursor:pointer;color:#2858a8}
pre{background:#f4f5f7;padding:8px;border-radius:4px;overflow-x:auto;font-size:12px;margin:4px 0}
dl{display:grid;grid-template-columns:max-content auto;gap:2px 12px;margin:6px 0;font-size:12px}
dt{color:#4a5563}dd{margin:0}
footer{color:#7a828c;font-size:12px;margin-top:20px}
"""


@dataclass(frozen=True)
class ReportWritten:
    """What ``write_report`` wrote."""

    path: Path
    run_id: str
    workloads: int
    trials: int
    size_bytes: int


def _plotly_js() -> tuple[str, str]:
    try:
        import plotly
        from plotly.offline import get_plotlyjs
    except ImportError as e:
        raise DependencyError.missing("plotly", "report", "autotune report") from e
    return get_plotlyjs(), str(plotly.__version__)


def _figure_html(chart: Chart) -> str:
    import plotly.io as pio

    return str(pio.to_html(chart.figure, full_html=False, include_plotlyjs=False,
                           div_id=f"{chart.id}-plot",
                           config={"displaylogo": False, "responsive": True}))


def _e(x: Any) -> str:
    return escape("" if x is None else str(x))


def _num(x: Any, digits: int = 4) -> str:
    if isinstance(x, int | float) and not isinstance(x, bool):
        return f"{x:.{digits}g}"
    return "n/a"


def _short(sha: Any) -> str:
    return _e(str(sha)[:12]) if sha else "n/a"


def _header(data: ReportData) -> str:
    run = data.run
    failed = sum(len(w.failed) for w in data.workloads)
    status = run.status
    status_html = _e(status) if status == "finished" else f'<b class="bad">{_e(status)}</b>'
    return (
        f"<h1>autotune report · run <code>{_e(run.id)}</code></h1>"
        f'<p class="meta">status {status_html} · backend <code>{_e(run.backend)}</code>'
        f" · policy <code>{_e(run.policy_name)}</code> ({_short(run.policy_sha256)})"
        f" · seed {_e(run.seed)}<br>traffic <code>{_e(run.sample_path)}</code> "
        f"({_e(run.sample_requests)} requests, sha256 {_short(run.sample_sha256)})"
        f" · started {_e(iso(run.started_at))} · finished {_e(iso(run.finished_at))}<br>"
        f"{len(data.workloads)} workloads · {data.trial_count} trials ({failed} failed) · "
        f"objective <code>{_e(data.objective)}</code> · cost {_e(data.cost().describe())}"
        + (f'<br><span class="bad">run error: {_e(run.error)}</span>' if run.error else "")
        + "</p>")


def _provenance(rec: RecommendationRecord) -> str:
    prov = rec.provenance
    traffic = prov.get("traffic") or {}
    policy = prov.get("policy") or {}
    spec = rec.speculative_config
    rows = [
        ("model", prov.get("model")), ("draft model", prov.get("draft_model")),
        ("method", prov.get("method")), ("backend", rec.backend),
        ("hardware", prov.get("hardware")), ("vLLM version", prov.get("vllm_version")),
        ("traffic", f"{traffic.get('path')} · {traffic.get('requests')} requests · sha256 "
                    f"{traffic.get('sha256')}"),
        ("policy", f"{policy.get('name')} · sha256 {policy.get('sha256')}"),
        ("run", rec.run), ("seed", prov.get("seed")), ("trial id", rec.trial_id),
        ("trials", prov.get("trials")), ("created", iso(rec.created_at)),
        ("retired", iso(rec.retired_at)),
    ]
    dl = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in rows if v is not None)
    flag = (f"<pre>--speculative-config '{_e(json.dumps(dict(spec), sort_keys=True))}'</pre>"
            if spec else "<p>served without a drafter</p>")
    full = _e(json.dumps(dict(prov), indent=2, sort_keys=True, default=str))
    return (f"<details><summary>provenance</summary><dl>{dl}</dl>{flag}"
            f"<details><summary>full provenance JSON</summary><pre>{full}</pre></details>"
            "</details>")


def _recommendation_row(rec: RecommendationRecord) -> str:
    cfg = rec.config
    acc = rec.provenance.get("acceptance") or {}
    ci = rec.value_ci
    value = _num(rec.value) + (f" [{_num(ci[0])}, {_num(ci[1])}]" if ci else "")
    speedup = rec.speedup_vs_baseline
    feasible = rec.provenance.get("feasible")
    slo = ("n/a" if feasible is None else
           '<span class="ok">yes</span>' if feasible else '<span class="bad">no</span>')
    status = _e(rec.status)
    adaptive = cfg.get("enable_adaptive_verification")
    return (
        f"<tr><td><b>{_e(rec.workload)}</b></td>"
        f'<td><span class="status {status}">{status}</span></td>'
        f'<td class="num">{_e(cfg.get("num_speculative_tokens"))}</td>'
        f"<td>{'on' if adaptive else 'off' if adaptive is not None else 'n/a'}</td>"
        f'<td class="num">{_e(cfg.get("max_num_seqs"))}</td>'
        f'<td class="num">{_e(cfg.get("max_num_batched_tokens"))}</td>'
        f'<td class="num">{value}</td><td class="num">{_num(rec.baseline_value)}</td>'
        f'<td class="num">{_num(speedup, 3) + "x" if speedup is not None else "n/a"}</td>'
        f'<td class="num">{_num(acc.get("predicted_tokens_per_step"), 3)} → '
        f'{_num(acc.get("measured_tokens_per_step"), 3)}</td>'
        f"<td>{slo}</td><td>{_outputs_cell(rec.provenance.get('outputs'))}</td>"
        f'<td class="reason">{_e(rec.reason)}{_provenance(rec)}</td></tr>')


def _outputs_cell(check: Any) -> str:
    """An output check (docs/outputs.md) in a cell: identical share, first divergence and the
    verdict; "not checked" without tokens."""
    if not isinstance(check, Mapping) or not check.get("checked"):
        return "not checked"
    share = check.get("identical_share")
    first = check.get("first_divergence")
    parts = []
    if isinstance(share, int | float):
        parts.append(f"{share:.0%} of {_e(check.get('prompts'))} identical")
    if isinstance(first, Mapping):
        parts.append(f"first divergence: prompt {_e(first.get('prompt'))}, token "
                     f"{_e(first.get('position'))}")
    verdict = ('<b class="bad">FLAGGED</b>' if check.get("flagged") else
               '<span class="ok">faithful</span>')
    return "<br>".join([verdict, *parts])


def _output_checks(data: ReportData) -> str:
    """Every trial's output check, per workload (none: a backend without tokens)."""
    rows = []
    for w in data.workloads:
        for t in sorted(w.trials, key=lambda t: t.number):
            if t.output_check is None or not t.output_check.get("checked"):
                continue
            rows.append(f"<tr><td>{_e(w.name)}</td><td class=\"num\">{t.number}</td>"
                        f"<td>{_e(t.label())}{' (baseline)' if t.baseline else ''}</td>"
                        f"<td>{_outputs_cell(t.output_check)}</td>"
                        f'<td class="reason">{_e(t.output_check.get("reason"))}</td></tr>')
    if not rows:
        return ('<section id="outputs"><h2>Outputs checked</h2><p class="caption">Outputs not '
                "checked: this run's backend decodes no tokens (the simulator), or the policy "
                "sets <code>outputs.prompts: 0</code>.</p></section>")
    head = ("<tr><th>workload</th><th>#</th><th>config</th><th>outputs</th><th>verdict</th>"
            "</tr>")
    return ('<section id="outputs"><h2>Outputs checked</h2><p class="caption">Each trial '
            "decoded the same prompts greedily; its tokens against the baseline's and a "
            "config without speculation's. A divergence where the two tokens nearly tie is the "
            "engine's numerics; any other flags the config (never promoted, exported only with "
            "<code>--force</code>).</p>"
            f'<div class="scroll"><table><thead>{head}</thead><tbody>{"".join(rows)}'
            "</tbody></table></div></section>")


def _recommendations(data: ReportData) -> str:
    head = ("<tr><th>workload</th><th>status</th><th>window</th><th>adaptive</th>"
            "<th>max_num_<wbr>seqs</th><th>max_num_<wbr>batched_<wbr>tokens</th>"
            f"<th>{_e(data.objective)} [CI]</th><th>baseline</th><th>speedup</th>"
            "<th>tokens/step pred → meas</th><th>SLOs met</th><th>outputs</th>"
            "<th>reason</th></tr>")
    body = "".join(_recommendation_row(r) for r in data.recommendations)
    if not body:
        body = ('<tr><td colspan="13">this run made no recommendation (every trial failed?); '
                "see <code>autotune trials --run "
                f"{_e(data.run.id)}</code></td></tr>")
    return (
        '<section id="recommendations"><h2>Recommendations of this run</h2>'
        '<p class="caption">One row per workload: the configuration chosen, its objective '
        "value against the policy's baseline trial, tokens per verify step predicted from the "
        "sample's confidence-head values and measured by the replica, and the provenance "
        "(expand). Active recommendations are what <code>autotune export</code> writes.</p>"
        f'<div class="scroll"><table><thead>{head}</thead><tbody>{body}</tbody></table></div>'
        "</section>")


def _cost(data: ReportData) -> str:
    """What the run cost on real replicas: per workload and in total, then per trial."""
    rows = [(w.name, data.cost(w.name)) for w in data.workloads] + [("all", data.cost())]
    body = "".join(
        f"<tr><td><b>{_e(name)}</b></td><td class=\"num\">{c.trials + c.uncounted}</td>"
        f'<td class="num">{c.starts}</td><td class="num">{_num(c.start_s / 3600, 3)}</td>'
        f'<td class="num">{_num(c.replay_s / 3600, 3)}</td>'
        f'<td class="num">{_num(c.replica_h, 3)}</td><td class="num">{_num(c.gpu_h, 3)}</td>'
        "</tr>" for name, c in rows)
    per_trial = "".join(
        f"<tr><td>{_e(w.name)}</td><td class=\"num\">{t.number}</td><td>{_e(t.label())}</td>"
        f'<td class="num">{_num(t.cost.start_s, 4)}</td>'
        f'<td class="num">{_num(t.cost.replay_s, 4)}</td>'
        f'<td class="num">{_num(t.cost.gpu_h, 3)}</td><td>{_e(t.start_source)}</td></tr>'
        for w in data.workloads for t in w.trials if t.cost is not None)
    stop = data.run.budget_stop
    sim = data.run.backend == "sim"
    return (
        '<section id="cost"><h2>Cost on real replicas</h2>'
        '<p class="caption">Replica time the run held: server starts (measured on real engines; '
        "on the simulator the profile's start time, charged as real replicas would pay it; a "
        "server kept for the next trial of the same config is charged once) and the traffic "
        "replayed by every reading, in replica-hours and GPU-hours."
        + (" Simulated: what this run would cost on the profile's hardware." if sim else "")
        + "</p>"
        + (f'<p class="bad">The budget ended this pass: {_e(stop)}</p>' if stop else "")
        + '<div class="scroll"><table><thead><tr><th>workload</th><th>trials</th>'
        "<th>server starts</th><th>start h</th><th>replay h</th><th>replica-h</th>"
        f"<th>GPU-h</th></tr></thead><tbody>{body}</tbody></table></div>"
        "<details><summary>per trial</summary><div class=\"scroll\"><table><thead><tr>"
        "<th>workload</th><th>#</th><th>config</th><th>start s</th><th>replay s</th>"
        f"<th>GPU-h</th><th>start source</th></tr></thead><tbody>{per_trial}</tbody></table>"
        "</div></details></section>")


def _no_plan(data: ReportData) -> str:
    """Why the run has no capacity plan (nothing when it has one: its chart says it)."""
    if data.plan is not None:
        return ""
    return ('<section id="plan"><h2>Capacity plan</h2><p class="caption">No plan for this '
            f"run: {_e(data.plan_note)}</p></section>")


def _chart_section(chart: Chart) -> str:
    return (f'<section id="{_e(chart.id)}"><h2>{_e(chart.title)}</h2>'
            f'<p class="caption">{_e(chart.caption)}</p>{_figure_html(chart)}</section>')


def render_report(data: ReportData, charts: Sequence[Chart] | None = None) -> str:
    """The whole HTML document of a report."""
    js, plotly_version = _plotly_js()
    charts = build_charts(data) if charts is None else charts
    nav = "".join(f'<a href="#{_e(c.id)}">{_e(c.title.split(":")[0])}</a>' for c in charts)
    title = f"autotune report · run {data.run.id}"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{_CSS}</style>"
        f"<!-- plotly.js (MIT license), inlined so this file works offline -->\n"
        f'<script type="text/javascript">{js}</script></head>\n<body><main>'
        f'<header>{_header(data)}<nav><a href="#recommendations">Recommendations</a>{nav}'
        '<a href="#cost">Cost</a></nav></header>'
        + _recommendations(data)
        + _output_checks(data)
        + _no_plan(data)
        + "".join(_chart_section(c) for c in charts)
        + _cost(data)
        + f"<footer>generated {_e(data.generated_at)} by autotune {_e(__version__)} from "
        f"{_e(data.db)} · charts: plotly {_e(plotly_version)}, inlined (no network "
        "needed)</footer></main></body></html>\n")


def write_report(store: Store, output: str | Path, run_id: str | None = None) -> ReportWritten:
    """Render the report of ``run_id`` (default: the newest finished run) to ``output``."""
    data = load_report_data(store, run_id)
    text = render_report(data)
    path = write_atomic(output, text)
    return ReportWritten(path=path, run_id=data.run.id, workloads=len(data.workloads),
                         trials=data.trial_count, size_bytes=len(text.encode("utf-8")))
