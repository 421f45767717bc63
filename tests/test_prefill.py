"""Prefill and time to first token (issue 20): the prompt chunk by chunk through the decode
placement, on every kind; ``run --json``'s ``ttft_s``, ``report``'s prefill and ``compare``."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import pyaccel as pa
from pyaccel.cli import app
from pyaccel.prefill import chunks_of, prefill
from pyaccel.results import prepare, run
from pyaccel.sim.pipeline import stream_makespan

# one system of each kind, with the tiny model it runs
KINDS = [
    ("h100", "tiny-llama", False),
    ("wse3", "tiny-llama", False),
    ("groq-tsp", "tiny-llama", False),
    ("taalas-hc1", "tiny-llama", True),
]


def _cli(*args):
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == 0, res.output
    return res.output


def test_chunks_by_hand():
    assert chunks_of(5000, 2048) == [(0, 2048), (2048, 2048), (4096, 904)]
    assert chunks_of(4096, 8192) == [(0, 4096)]
    assert chunks_of(0, 16) == [(0, 1)]  # a prompt has at least one token


@pytest.mark.parametrize("system,model,etch", KINDS)
def test_ttft_on_every_kind_grows_with_the_prompt_and_beats_token_by_token(system, model, etch):
    args = ["run", "--system", system, "--model", model, "--tokens", "2", "--json"]
    args += ["--etch"] if etch else []
    ttft = {}
    for context in (32, 128, 384):
        rec = json.loads(_cli(*args, "--context", str(context)))
        assert rec["ttft_s"] == rec["prefill"]["ttft_s"] > 0
        # a prefill step takes many prompt tokens at once: faster than one step a token
        assert rec["ttft_s"] < context * rec["step_time_s"]
        ttft[context] = rec["ttft_s"]
    assert ttft[32] <= ttft[128] <= ttft[384]


@pytest.mark.parametrize("system,model,etch", KINDS)
def test_smaller_chunks_are_the_sum_of_their_steps(system, model, etch):
    work = pa.Workload(context=100, tokens=1)
    p = prepare(model, system, "auto", work, ["prefill_chunk_tokens=32"], etch)
    pf = prefill(p.model, p.system, p.placement, p.workload)
    assert [(c.context, c.tokens) for c in pf.chunks] == [(0, 32), (32, 32), (64, 32), (96, 4)]
    # wafers and LPUs stream the chunks through their stages; GPUs and the ASIC run them in turn
    assert pf.streamed == (system in ("wse3", "groq-tsp"))
    if pf.streamed:  # overlapping chunks never take longer than one after another
        assert max(c.seconds for c in pf.chunks) <= pf.ttft_s <= sum(c.seconds for c in pf.chunks)
    else:
        assert pf.ttft_s == sum(c.seconds for c in pf.chunks)
    # a later chunk attends to more cached tokens: never faster than the first of its size
    assert all(c.seconds >= pf.chunks[0].seconds for c in pf.chunks[1:3])


def test_streamed_chunks_by_hand():
    # 3 stages busy 2, 3, 1 cycles a chunk, two chunks, no crossings: chunk 0 leaves at 6;
    # chunk 1 waits for stage 1 (free at 5): s1 [5,8), s2 [8,9) -> 9 (12 one after another)
    assert stream_makespan([[2, 3, 1], [2, 3, 1]], None) == 9
    # crossings into stages 1 and 2 busy 1 with latencies 2 and 0; the loop back (index 0) is
    # not taken: chunk 0: s0 [0,2), link [2,3) +2 -> s1 [5,8), link [8,9) -> s2 [9,10);
    # chunk 1: s0 [2,4), link [4,5) +2 = 7, s1 free at 8: [8,11), link [11,12) -> s2 [12,13)
    links = [[(5, 5), (1, 2), (1, 0)]] * 2
    assert stream_makespan([[2, 3, 1], [2, 3, 1]], links) == 13


def test_h100_prefill_is_compute_bound_within_3x_of_peak():
    # 2 FLOPs a parameter a token at the datasheet's dense BF16 rate is the floor; the
    # emulated GEMMs, attention and launches stay within 3x of it
    result = run("llama-3.1-8b", "h100", 1, pa.Workload(context=4096, tokens=1), prefill="ttft")
    params = pa.build_graph(result.model, result.workload).param_count
    floor = 2 * params * 4096 / result.system.spec.params.bf16_flops_per_s
    assert floor <= result.prefill.ttft_s <= 3 * floor


def test_report_says_where_prefill_time_goes():
    data = json.loads(_cli("report", "--system", "h100", "--model", "tiny-llama", "--context",
                           "256", "--tokens", "2", "--json"))  # fmt: skip
    pf = data["prefill"]
    assert pf["busiest_resource"] == max(pf["resource_s"], key=pf["resource_s"].get)
    assert pf["chunks"] == 1 and pf["prompt_tokens"] == 256
    assert any(a.startswith("prefill.idle_machine") for a in data["assumptions"])
    text = _cli("report", "--system", "h100", "--model", "tiny-llama", "--context", "256",
                "--tokens", "2")  # fmt: skip
    assert "time to first token" in text


def test_run_times_the_prefill_and_leaves_where_it_goes_to_report():
    # run does not keep the prefill's events, so it claims no busy seconds (null, not {})
    rec = json.loads(_cli("run", "--system", "h100", "--model", "tiny-llama", "--context",
                          "256", "--tokens", "2", "--json"))  # fmt: skip
    assert rec["prefill"]["ttft_s"] == rec["ttft_s"] > 0
    assert rec["prefill"]["resource_s"] is None and rec["prefill"]["busiest_resource"] is None
    # report keeps them; streamed chunks overlap, so a share of the TTFT may pass 100 %: said
    args = ["report", "--system", "groq-tsp", "--model", "tiny-llama", "--context", "96",
            "--tokens", "2", "--set", "prefill_chunk_tokens=32"]  # fmt: skip
    pf = json.loads(_cli(*args, "--json"))["prefill"]
    assert pf["streamed"] and pf["chunks"] == 3 and pf["resource_s"]
    text = _cli(*args)
    assert "of TTFT" in text and "may exceed 100 %" in " ".join(text.split())


def test_compare_has_ttft_and_chunk_assumption_where_not_sourced():
    recs = json.loads(_cli("compare", "--model", "tiny-llama", "--systems", "h100,groq-tsp",
                           "--context", "64", "--tokens", "2", "--json"))  # fmt: skip
    assert all(r["ttft_s"] > 0 for r in recs)
    by = {r["system"]: r for r in recs}
    # h100's chunk is vLLM's default (a source): only the prefill's own assumption names it
    assert sum("prefill_chunk" in a for a in by["h100"]["assumptions"]) == 1
    assert sum("prefill_chunk" in a for a in by["groq-tsp"]["assumptions"]) == 2
    assert "TTFT" in _cli("compare", "--model", "tiny-llama", "--systems", "h100",
                          "--context", "64", "--tokens", "2")  # fmt: skip


def test_chunks_overlap_on_a_multi_stage_lpu():
    # llama-3.1-8b on groq-tsp spans several pipeline stages: a later chunk starts on the first
    # stage while an earlier one is on the next, so the prompt takes less than its chunks' sum
    work = pa.Workload(context=256, tokens=1)
    p = prepare("llama-3.1-8b", "groq-tsp", "auto", work, ["prefill_chunk_tokens=64"])
    assert p.placement.layout.pp > 1
    pf = prefill(p.model, p.system, p.placement, p.workload)
    assert pf.streamed and len(pf.chunks) == 4
    assert pf.ttft_s < 0.9 * sum(c.seconds for c in pf.chunks)


# --- a prompt chunk samples one row a sequence (its last) ----------------------------------------

V, H = 256, 64  # tiny-llama's vocabulary and width


def _head(graph) -> dict:
    return {op.kind: op for op in graph.ops if op.layer == "head"}


def test_prefill_chunk_samples_one_row_a_sequence_by_hand():
    model = pa.load_model("tiny-llama")
    chunk = pa.build_graph(model, pa.Workload(batch=2, context=0, step_tokens=8, prefill=True))
    head = _head(chunk)
    # the LM head: 2 sequences x one row x 256 x 64 MACs; sampling: 256 scores a row
    assert (head["lm_head"].m, head["lm_head"].flops) == (2, 2 * 2 * V * H)
    assert head["lm_head"].act_bytes == 2 * 2 * (V + H)  # bf16 input row and logits row
    assert (head["sampling"].m, head["sampling"].flops) == (2, 2 * V)
    assert head["sampling"].act_bytes == 2 * 2 * V
    # the final norm runs in the model's forward over every row (vLLM selects rows after it)
    assert head["final_norm"].m == 16
    # the weights are read once a step either way
    verify = pa.build_graph(model, pa.Workload(batch=2, context=0, step_tokens=8))
    vhead = _head(verify)
    assert head["lm_head"].weight_bytes == vhead["lm_head"].weight_bytes == V * H * 2
    # a verification step samples every row (each drafted token needs the target's logits)
    assert (vhead["lm_head"].m, vhead["lm_head"].flops) == (16, 2 * 16 * V * H)
    assert vhead["sampling"].flops == 16 * V


def test_prefill_head_share_of_llama_flops():
    # the LM head of 8,192 prompt rows was 17.5 % (1B) and 6.1 % (8B) of a chunk's FLOPs; one
    # row's is 2 x 128,256 x hidden FLOPs
    for name, hidden in (("llama-3.2-1b", 2048), ("llama-3.1-8b", 4096)):
        graph = pa.build_graph(pa.load_model(name),
                               pa.Workload(context=0, step_tokens=8192, prefill=True))  # fmt: skip
        head = _head(graph)
        assert head["lm_head"].flops == 2 * 128_256 * hidden
        total = sum(op.flops for op in graph.ops)
        assert (head["lm_head"].flops + head["sampling"].flops) / total < 1e-4


def test_softcapped_logits_only_for_the_sampled_row():
    graph = pa.build_graph(pa.load_model("tiny-gemma2"),
                           pa.Workload(context=0, step_tokens=8, prefill=True))  # fmt: skip
    assert _head(graph)["logit_softcap"].m == 1


def test_with_workload_between_decode_and_prefill_equals_the_builder():
    for name in ("tiny-llama", "tiny-gemma2", "tiny-deepseek-v3", "tiny-mixtral"):
        model = pa.load_model(name)
        decode = pa.build_graph(model, pa.Workload(batch=3, context=40))
        chunk = pa.Workload(batch=1, context=40, step_tokens=16, prefill=True).resolved("bf16")
        want = pa.build_graph(model, chunk)
        assert decode.with_workload(chunk) == want, name
        assert want.with_workload(decode.workload) == decode, name


def test_workload_prefill_must_be_a_bool():
    with pytest.raises(pa.ConfigError, match="'prefill' must be True or False, got 'yes'"):
        pa.Workload(prefill="yes")


@pytest.mark.parametrize("system,model,etch", KINDS)
def test_every_kind_runs_the_head_of_a_prompt_chunk_on_its_sampled_row(system, model, etch):
    p = prepare(model, system, "auto", pa.Workload(context=32, tokens=1), etch=etch)
    head = {}
    for flag in (False, True):  # the same 32 rows, verified (all sampled) or prefilled (one)
        work = pa.Workload(context=0, step_tokens=32, tokens=1, prefill=flag,
                           weights=p.workload.weights)  # fmt: skip
        df = pa.emulate(p.model, p.system, p.placement, work, event_steps={0}).to_dataframe()
        head[flag] = df[df.op.str.startswith("lm_head") & (df.resource != "fixed_latency")]
    if system == "groq-tsp":  # the LPU's events carry no FLOPs: the MXM streams 1 vector, not 32
        mxm = {f: h[h.resource == "lpu_mxm"].duration.sum() for f, h in head.items()}
        assert mxm[True] * 32 == mxm[False]
    else:
        assert head[True].flops.sum() == 2 * V * H and head[False].flops.sum() == 32 * 2 * V * H
    if system == "taalas-hc1":  # only the sampled (last) row enters the LM head's block
        assert set(head[True].op) == {"lm_head[u31]"} and len(set(head[False].op)) == 32
