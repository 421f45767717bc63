"""Host <-> wafer transfers a decode pass waits on (issue 15, item 1): off by default (the
vendor runs wafer I/O asynchronously from compute), ranged 0..2 for --sensitivity, and when
on, each costs one SDK transaction's fixed cost plus the token ids over one channel."""

import math

import pytest

import pyaccel as pa
from pyaccel.sensitivity import assumption_sensitivity

WORK = pa.Workload(batch=8, context=64, tokens=2)


def _trace(sets=()):
    model, sysm = pa.load_model("tiny-llama"), pa.load_system("wse3", 1, overrides=list(sets))
    return pa.emulate(model, sysm, pa.place(model, sysm, WORK), WORK)


def test_two_transfers_cost_two_transactions_by_hand():
    p = pa.load_system("wse3").spec.params
    base, host = _trace(), _trace(["host_transfers_per_step=2"])
    # 8 int32 token ids = 32 B over one 7 Gb/s channel, after the 200 us TCP transaction
    one = math.ceil((200e-6 + 32 / 0.875e9) * p.clock_hz)
    assert (p.host_io_latency_s, p.host_io_bytes_per_s) == (200e-6, 0.875e9)
    passes = base.meta.get("micro_batches", 1)
    assert (host.step_cycles - base.step_cycles == 2 * one * passes).all()
    ev = host.events
    sel = (ev["step"] == ev["step"][0]) & (ev["resource"] == "host_io")
    assert int(ev["duration"][sel].sum()) == 2 * one * passes
    assert pa.Report.from_trace(host).bottleneck == "host_io"


def test_off_by_default_and_ranged_for_sensitivity():
    spec = pa.load_system("wse3").spec
    assert spec.params.host_transfers_per_step == 0
    assert spec.ranges["host_transfers_per_step"] == (0, 2)
    assert "host_io" not in set(_trace().events["resource"].tolist())
    (row,) = assumption_sensitivity(
        "tiny-llama", "wse3", 1, WORK, params=["host_transfers_per_step"]
    )
    assert row.ranged and row.low_change == 0.0
    assert row.high_step_s - row.base_step_s == pytest.approx(2 * 200e-6, rel=1e-3)


def test_what_if_halves_the_transaction_cost():
    # the transactions are ~90 % of the step: halving their cost gains most of x2
    host = _trace(["host_transfers_per_step=2"])
    gains = {r.resource: r.gain for r in pa.Report.from_trace(host).what_if}
    assert gains["host_io"] > 1.5 and gains["host_io"] == max(gains.values())


def test_host_sampling_sends_the_logits_out_by_hand():
    p = pa.load_system("wse3").spec.params
    base = _trace(["host_transfers_per_step=2"])
    host = _trace(["host_transfers_per_step=2", "host_sampling=1"])
    # tiny-llama: 256-entry vocabulary, 8 sequences: 256 x 2 B x 8 = 4,096 B of logits out
    # instead of 32 B of token ids, then 50 us of sampling on the host
    out = math.ceil((200e-6 + 4096 / 0.875e9) * p.clock_hz)
    ids = math.ceil((200e-6 + 32 / 0.875e9) * p.clock_hz)
    sample = math.ceil(50e-6 * p.clock_hz)
    passes = base.meta.get("micro_batches", 1)
    assert (host.step_cycles - base.step_cycles == (out + sample - ids) * passes).all()


def test_host_sampling_needs_a_transfer_out():
    with pytest.raises(pa.ConfigError, match="host_sampling"):
        pa.load_system("wse3", overrides=["host_sampling=1"])
    with pytest.raises(pa.ConfigError, match="host_sampling"):
        pa.load_system("wse3", overrides=["host_sampling=2", "host_transfers_per_step=2"])


def test_a_prompt_chunk_sends_one_row_of_logits_out_by_hand():
    # a 16-token prompt chunk of one sequence, host sampling: the transfer out carries the
    # one sampled row's 256 x 2 B = 512 B of logits (not 16 rows' 8,192 B); the transfer in
    # the 16 prompt token ids (64 B)
    model = pa.load_model("tiny-llama")
    sysm = pa.load_system("wse3", 1, overrides=["host_transfers_per_step=2", "host_sampling=1"])
    p = sysm.spec.params
    chunk = pa.Workload(context=0, step_tokens=16, tokens=1, prefill=True)
    trace = pa.emulate(model, sysm, pa.place(model, sysm, chunk), chunk)
    ev = trace.events
    sel = ev["resource"] == "host_io"
    assert ev["bytes"][sel].tolist() == [512 + 64]
    cost = (
        math.ceil((200e-6 + 512 / 0.875e9) * p.clock_hz)
        + math.ceil((200e-6 + 64 / 0.875e9) * p.clock_hz)
        + math.ceil(50e-6 * p.clock_hz)
    )
    assert ev["duration"][sel].tolist() == [cost]
