"""The regret benchmark's oracle says how far its own readings let a regret be trusted."""

from __future__ import annotations

import pytest

from bench.regret.oracle import Table, held_out, settle
from bench.regret.reading import Reading
from bench.regret.table import markdown


def test_regret_carries_the_standard_error_of_the_oracles_readings() -> None:
    def read(*values: float) -> list[Reading]:
        return [Reading(v, True, {}, {}) for v in values]

    table = Table({"best": read(1.0, 1.0, 1.0, 1.0), "noisy": read(0.7, 0.9),
                   "once": read(0.95), "steady": read(0.8, 0.8)})
    assert table.oracle() == ("best", 1.0)
    assert table.regret("noisy") == pytest.approx(0.2)
    # the ratio 0.8 × the relative standard error of its mean, sqrt(0.02 / 2) / 0.8
    assert table.regret_se("noisy") == pytest.approx(0.1, rel=1e-9)
    assert table.regret_se("steady") == 0.0      # readings that agree leave no doubt
    assert table.regret_se("best") == 0.0
    assert table.regret_se("once") is None       # one reading has no spread to read
    assert table.regret_se(None) is None


def test_the_oracle_reads_again_what_it_cannot_tell_from_its_best() -> None:
    """A config whose readings split (0.85 and 1.2) is read until its mean settles, and becomes
    the best; read low twice it is not read at all, nor is one far below the best or one whose
    readings agree."""
    def read(*values: float) -> list[Reading]:
        return [Reading(v, True, {}, {}) for v in values]

    table = Table({"best": read(1.0, 1.0), "bimodal": read(0.85, 0.86),
                   "steady": read(0.99, 0.99), "far": read(0.5, 0.7)})
    later = {"bimodal": [1.2, 0.85, 1.2, 1.2, 0.86, 1.2], "best": [1.0] * 6}
    asked: list[tuple[str, int]] = []

    def more(config: str, seed: int) -> Reading:
        asked.append((config, seed))
        n = sum(1 for c, _ in asked if c == config)
        return Reading(later[config][n - 1], True, {}, {})

    assert table.in_doubt("bimodal", 1.0, 0.03, 0.005) is False  # read low twice: nothing to doubt
    table.readings["bimodal"] = read(0.85, 1.2)
    added = settle(table, more, within=0.03, se_to=0.005, most=8)
    assert {c for c, _ in asked} == {"bimodal"}
    assert [s for _, s in asked] == [1002, 1003, 1004, 1005, 1006, 1007]
    assert added == 6 and len(table.readings["bimodal"]) == 8
    assert table.oracle()[0] == "bimodal"
    assert not settle(table, more, within=0.03, se_to=0.005, most=8)


def test_a_real_engine_seed_is_scored_on_readings_it_never_saw() -> None:
    """Seed s's oracle holds the other seeds' sweep readings of every config and the readings
    the settle step adds on the oracle's own replay seeds: never seed s's own reading. Every
    config within reach of the best is read in the same rounds, a steady one too; one far below
    is not read again."""
    def reading(value: float, tag: str) -> Reading:
        return Reading(value, True, {}, {"tag": tag})

    # window 1, window 4 and a steady window 2 within 3%; window 5 at 1 sequence far below
    sweep = {"w1": [reading(v, f"w1/{s}") for s, v in enumerate([73.0, 70.0, 75.0])],
             "w4": [reading(v, f"w4/{s}") for s, v in enumerate([71.0, 74.0, 70.5])],
             "w2": [reading(v, f"w2/{s}") for s, v in enumerate([72.0, 72.1, 72.0])],
             "far": [reading(v, f"far/{s}") for s, v in enumerate([30.0, 31.0, 29.0])]}
    asked: list[tuple[str, int]] = []

    def more(config: str, seed: int) -> Reading:
        asked.append((config, seed))
        return reading({"w1": 70.0, "w4": 74.0, "w2": 71.0}[config], f"{config}@{seed}")

    tables = held_out(sweep, more, within=0.03, most=8)
    assert {c for c, _ in asked} == {"w1", "w4", "w2"}
    for config in ("w1", "w4", "w2"):   # the same rounds on the same replay seeds
        assert [s for c, s in asked if c == config] == [1003, 1004, 1005, 1006, 1007]
    for s, table in enumerate(tables):
        for config, readings in table.readings.items():
            tags = [r.summary["tag"] for r in readings]
            assert f"{config}/{s}" not in tags
            assert sum("/" in t for t in tags) == 2                  # the other seeds' sweep
            assert len(tags) == (7 if config != "far" else 2)        # + five settling readings
        assert table.oracle()[0] == "w4"    # the settled means: w4 74 against w1 70, w2 71


def test_the_markdown_table_has_a_row_per_world_and_one_over_all() -> None:
    def summary(guided: tuple[float, float, float, float], tpe_at6: float) -> dict[str, object]:
        median, worst, runs, at6 = guided
        return {"methods": {
            "guided": {"median_regret": median, "max_regret": worst, "median_runs": runs,
                       "regret_at_6": at6},
            "tpe": {"median_regret": 0.01, "max_regret": 0.2, "median_runs": 12.0,
                    "regret_at_6": tpe_at6},
            "default": {"median_regret": 0.2146}}}

    text = markdown({"worlds": {"a/dspark": summary((0.0, 0.0182, 6.0, 0.0), 0.0133),
                                "b/eagle3": summary((0.001, 0.03, 4.5, 0.002), 0.05)},
                     "summary": summary((0.0, 0.03, 5.0, 0.0), 0.02)})
    lines = text.splitlines()
    assert lines[0].startswith("| world | guided median / worst |")
    assert lines[1] == "|---|---|---|---|---|---|---|---|---|---|---|---|"
    assert lines[2] == ("| a/dspark | 0.00% / 1.82% | 6 | 0.00% | 1.33% | 1.00% / 20.00% | - | - "
                        "| 21.46% | - | - | - |")  # no cost, no binding SLO in these rows
    assert lines[3].startswith("| b/eagle3 | 0.10% / 3.00% | 4.5 | 0.20% | 5.00% |")
    assert lines[4].startswith("| all 2 worlds | 0.00% / 3.00% | 5 |")
    assert len(lines) == 5


def test_the_table_gives_regret_at_equal_gpu_hours_and_the_binding_units() -> None:
    """Runs that carry their cost give guided's GPU-hours and, at them, guided's regret against
    TPE's with their ratio; binding units are counted of the units."""
    def row(regret: float, gpu_h: float, at_gpu_h: float) -> dict[str, object]:
        return {"regret": regret, "runs": 6, "regret_se": None, "regret_at_6": regret,
                "to_2pct": 3.0, "chosen": "c", "stop": "", "trials": [], "gpu_h": gpu_h,
                "trial_gpu_h": [gpu_h], "regret_at_gpu_h": at_gpu_h, "gpu_h_to_1pct": gpu_h,
                "no_rate_trials": 0}

    from bench.regret.binding import Choice, Tail, record
    from bench.regret.report import result

    unit = {"slo": {"ttft_p99_ms": 3000.0, "itl_p99_ms": 60.0, "dilation": [1.0, 1.0, 1.0]},
            "oracle": "c", "oracle_value": 1.0, "oracle_feasible": True, "default_regret": 0.2,
            "default_meets_slo": True, "workload": "chat",
            "runs": {"guided": [row(0.01, 12.0, 0.01), row(0.01, 14.0, 0.01)],
                     "tpe": [row(0.0, 30.0, 0.04), row(0.0, 30.0, 0.04)]},
            "binding": record("a/dspark", 0.5, Choice("itl", 60.0, {}),
                              {"t": Tail(90.0, 80.0, 99.0, 500.0),
                               "s": Tail(40.0, 36.0, 45.0, 500.0)}, "t", False)}
    res = result({"a/dspark": [unit]}, ["chat"], {"a/dspark": 2})
    lines = markdown(res).splitlines()
    assert lines[2].endswith("| 13 | 1.00% / 4.00% (0.25) | 1 / 1 |")


def test_the_targets_column_names_what_a_world_misses() -> None:
    """With the units' details, each row says which targets it misses: a worst loss over 3%
    and a run losing to a default that meets the SLO are named; a world within them says so."""
    def summary(worst: float) -> dict[str, object]:
        return {"methods": {
            "guided": {"median_regret": 0.0, "max_regret": worst, "median_runs": 6.0,
                       "regret_at_6": 0.0},
            "tpe": {"median_regret": 0.0, "max_regret": 0.05, "median_runs": 12.0,
                    "regret_at_6": 0.02},
            "default": {"median_regret": 0.2}}}

    def unit(regret: float, default_regret: float) -> dict[str, object]:
        return {"workload": "chat", "default_regret": default_regret, "default_meets_slo": True,
                "runs": {"guided": [{"regret": regret}]}}

    units = {"good/w": [unit(0.01, 0.2)], "bad/w": [unit(0.08, 0.05)]}
    text = markdown({"worlds": {"good/w": summary(0.01), "bad/w": summary(0.08)}}, units)
    lines = text.splitlines()
    assert lines[0].endswith("| binding units | targets |")
    assert lines[2].endswith("| all met |")
    assert "misses: worst 8.00% <= 3%" in lines[3]
    assert "never loses to a default that meets the SLO (loses: chat seed 0)" in lines[3]


def test_the_oracle_is_a_config_that_met_the_slo_at_some_rate() -> None:
    """A capacity reading that met the SLO at no rate keeps its slowest replay, whose p99s may
    be within bounds: it reads feasible, but the recommendation never names it while a config
    met the SLO at some rate, so it is not the oracle either."""
    def capacity(value: float, met: bool) -> Reading:
        return Reading(value, True, {}, {"load_scale": 1 / 64 if not met else 0.5,
                                         "capacity_met_slo": 1.0 if met else 0.0})

    table = Table({"met nowhere": [capacity(0.030, False), capacity(0.029, False)],
                   "met": [capacity(0.028, True), capacity(0.028, True)]})
    assert table.oracle()[0] == "met"
    assert table.regret("met") == 0.0
    assert not table.mostly_feasible("met nowhere") and not table.meets_somewhere("met nowhere")
    # with no config meeting it anywhere, the best of all is the oracle, as before
    nowhere = Table({"a": [capacity(0.030, False)], "b": [capacity(0.020, False)]})
    assert nowhere.oracle()[0] == "a"
