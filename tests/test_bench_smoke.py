"""The status scale benchmark (bench/bench_status_scale.py) cannot rot unnoticed: it
starts as ``make bench`` starts it, its options make the set issue 46 asks for, and the
loader it shares with bench_scale keeps bench_scale's set. Nothing here is timed; the
benchmark itself loads 10^6 licences and runs for minutes (``make bench``)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"


@pytest.fixture
def status_scale(monkeypatch):
    # The scripts import their helpers from beside them, as `python bench/x.py` does.
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module("bench_status_scale")


def test_the_script_starts_as_make_bench_runs_it():
    done = subprocess.run(
        [sys.executable, str(BENCH / "bench_status_scale.py"), "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "--licences" in done.stdout and "--reuse" in done.stdout


def test_default_set_is_a_million_live_licenses_and_a_million_revoked(status_scale):
    args = status_scale.parse_args([])
    plan = status_scale.plan_of(args)
    assert (args.licenses, args.revocations) == (1_000_000, 1_000_000)
    assert plan.licenses == 2_000_000
    assert plan.revoked == 1_000_000
    assert plan.revoked_step == 2  # every other unit revoked: the live half is asked about


def test_scaled_down_set_keeps_its_proportions(status_scale):
    plan = status_scale.plan_of(status_scale.parse_args(["--licences", "100000"]))
    assert (plan.licenses, plan.revoked) == (200_000, 100_000)
    fewer = status_scale.plan_of(
        status_scale.parse_args(["--licences", "1000", "--revocations", "10"])
    )
    assert (fewer.licenses, fewer.revoked, fewer.revoked_step) == (1010, 10, 101)


def test_too_small_a_set_is_refused(status_scale, capsys):
    with pytest.raises(SystemExit):
        status_scale.parse_args(["--licences", "10"])
    assert "--licences at least 100" in capsys.readouterr().err


def test_bench_scale_keeps_one_percent_revoked(status_scale):
    from _scale_data import Plan

    plan = Plan(10_000_000)
    assert plan.revoked == 100_000
    assert plan.revoked_step == 100  # licence 50 of each hundred, as before


def test_table_states_queries_per_thousand_requests(status_scale):
    rows = [
        status_scale.Row("cold", 50.0, 0, 200.0, None),
        status_scale.Row("cached", 20_000.0, 0, 2.0, 0.0, "HIT 100.0%"),
    ]
    lines = status_scale.table(rows)
    assert "per 1,000 req" in lines[0]
    assert lines[2].split("|")[4].strip() == "4,000"  # 200 q/s at 50 req/s
    assert lines[3].split("|")[4].strip() == "0"
    assert lines[3].rstrip().endswith("HIT 100.0%")


def test_wrk_script_picks_a_random_status_url_per_request(status_scale):
    assert "math.random(#paths)" in status_scale.LUA
    paths = status_scale.status_paths([("LIC-SC0000000002", "scale-2")])
    assert paths == ["/v1/revocations/status?license_id=LIC-SC0000000002&device_id=scale-2"]
