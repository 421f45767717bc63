"""Typed run records: ``to_dict()`` gives the ``run --json`` / ``compare --json`` objects."""

from __future__ import annotations

import json
import math

import pytest

from pyaccel.cli_args import parse_batches, parse_systems, parse_units
from pyaccel.errors import ConfigError
from pyaccel.records import ErrorRecord, RunRecord
from pyaccel.report import Report
from pyaccel.results import error_record, run, run_record
from pyaccel.workload import Workload

# SPEC §7: the keys every `run --json` object has (at least)
CONTRACT_KEYS = (
    "schema_version", "pyaccel_version", "system", "model", "units", "batch", "context",
    "tokens", "weights", "kv", "tokens_per_s_per_user", "tokens_per_s", "step_time_s",
    "lower_bound_step_time_s", "bottleneck", "joules_per_token", "assumptions", "warnings",
)  # fmt: skip
FUNCTIONAL_KEYS = ("top1_agreement", "max_abs_logit_error", "perplexity_ratio")


@pytest.fixture(scope="module")
def tiny_record() -> RunRecord:
    result = run("tiny-llama", "h100", 1, Workload(context=128, tokens=2), functional=True)
    return run_record(result, Report.from_trace(result.trace, what_if=False))


def test_run_record_has_the_contract_keys_and_functional_metrics_last(tiny_record):
    data = tiny_record.to_dict()
    assert set(CONTRACT_KEYS) <= set(data)
    keys = list(data)
    plain = [k for k in keys if k not in tiny_record.functional]
    assert keys == plain + list(tiny_record.functional)  # the metrics come last
    assert set(FUNCTIONAL_KEYS) <= set(keys[len(plain) :])
    assert "functional" not in data


def test_run_record_round_trips_through_json(tiny_record):
    data = json.loads(json.dumps(tiny_record.to_dict()))
    functional = {k: data.pop(k) for k in list(tiny_record.functional)}
    again = RunRecord(**data, functional=functional)
    assert again.to_dict() == tiny_record.to_dict()
    assert list(again.to_dict()) == list(tiny_record.to_dict())


def test_error_record_keys_in_compare_order():
    work = Workload(batch=4, context=64, tokens=2, weights="int8", kv="fp8").resolved("bf16")
    rec = error_record("m", "s", "gpu", "auto", work, "why", {"weights": "model"}, ("w",))
    assert isinstance(rec, ErrorRecord)
    assert list(rec.to_dict()) == [
        "schema_version", "pyaccel_version", "kind", "system", "model", "units", "batch",
        "context", "tokens", "weights", "expert_weights", "kv", "error", "formats_from",
        "warnings",
    ]  # fmt: skip
    assert rec.to_dict()["warnings"] == ["w"] and rec.to_dict()["batch"] == 4


def test_error_rows_carry_the_workload_keys_of_the_rows_that_ran():
    # an error row had system, model and batch only: a table of compare --json could not say
    # which context, tokens, formats or units a failed system was tried at
    from pyaccel.compare import compare

    work = Workload(context=128, tokens=2, kv="fp8")
    ran, failed = compare("tiny-llama", ["h100", "taalas-hc1"], work)
    ran, failed = ran.to_dict(), failed.to_dict()
    same = ["schema_version", "pyaccel_version", "kind", "system", "model", "units", "batch",
            "context", "tokens", "weights", "expert_weights", "kv"]  # fmt: skip
    assert list(failed)[: len(same)] == list(ran)[: len(same)] == same
    assert (failed["kind"], failed["units"], failed["context"], failed["tokens"]) == (
        "asic", "auto", 128, 2)  # fmt: skip
    assert (failed["weights"], failed["expert_weights"], failed["kv"]) == ("hc1", "hc1", "fp8")


@pytest.mark.parametrize(
    ("text", "value"), [("auto", "auto"), (" AUTO ", "auto"), ("3", 3), (2, 2)]
)
def test_parse_units(text, value):
    assert parse_units(text) == value


@pytest.mark.parametrize(
    ("text", "message"),
    [("0", "--units 0: must be at least 1"),
     ("x", "--units 'x': expected a positive integer or 'auto'")],
)  # fmt: skip
def test_parse_units_refuses(text, message):
    with pytest.raises(ConfigError, match=f"^{message}$"):
        parse_units(text)


def test_parse_batches_and_systems():
    assert parse_batches(None, 8) == [8] and parse_batches("1, 4,", 8) == [1, 4]
    assert parse_systems(None) is None and parse_systems("h100, wse3") == ["h100", "wse3"]
    with pytest.raises(ConfigError, match="listed twice"):
        parse_systems("h100,h100")
    for empty in ("", " ", ",", " , "):  # not silently the default batch
        with pytest.raises(ConfigError, match="no batch size given"):
            parse_batches(empty, 8)


def test_python_api_takes_typed_units():
    with pytest.raises(ConfigError, match="units must be a positive integer or 'auto'"):
        run("tiny-llama", "h100", "2")
    assert math.isfinite(run("tiny-llama", "h100", 2).trace.step_time_s)


def test_compare_takes_typed_lists_and_returns_typed_records():
    from pyaccel.compare import compare

    records = compare("tiny-llama", ["h100", "taalas-hc1"], Workload(context=128, tokens=2), [1, 2])
    assert [(type(r).__name__, r.system, r.batch) for r in records] == [
        ("RunRecord", "h100", 1), ("RunRecord", "h100", 2),
        ("ErrorRecord", "taalas-hc1", 1), ("ErrorRecord", "taalas-hc1", 2),
    ]  # fmt: skip
    assert "cannot run tiny-llama" in records[2].error and records[2].formats_from


def test_report_from_trace_gives_the_what_if_ranking_as_spec_8_promises():
    """``pa.Report.from_trace(trace)`` re-emulates the trace's own inputs (SPEC §8: "bottlenecks,
    what-if"); ``what_if=False`` is the trace alone; given rows are used as they are."""
    import pyaccel as pa

    model, system = pa.load_model("tiny-llama"), pa.load_system("h100", units=1)
    work = pa.Workload(context=64, tokens=2)
    trace = pa.emulate(model, system, pa.place(model, system, work), work)
    ranked = pa.Report.from_trace(trace).what_if
    assert ranked and [r.gain for r in ranked] == sorted((r.gain for r in ranked), reverse=True)
    assert all(r.step_time_s <= trace.step_time_s for r in ranked)
    assert pa.Report.from_trace(trace, what_if=False).what_if == []
    assert pa.Report.from_trace(trace, ranked[:1]).what_if == ranked[:1]
