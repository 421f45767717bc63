"""Speculative decoding (issue 18): the request's syntax, the drawn rounds and whole runs."""

from __future__ import annotations

import json

import numpy as np
import pytest

import pyaccel as pa
from pyaccel.errors import CapacityError, ConfigError
from pyaccel.results import run, run_record, speculative_summary
from pyaccel.spec_decode import Profile, Rounds, draw_rounds, parse
from pyaccel.speculate import SpecResult, acceptance_profiles

# --- syntax ---------------------------------------------------------------------------------


def test_parse_forms():
    s = parse("draft:llama-3.2-1b,k=4,accept=0.7")
    assert (s.kind, s.draft, s.k, s.accept) == ("draft", "llama-3.2-1b", 4, (0.7,) * 4)
    assert parse("eagle3").k == 4 and parse("eagle3").accept is None
    assert parse("mtp,k=2,accept=0.9/0.8").accept == (0.9, 0.8)
    assert parse("block,accept=measured").accept == "measured"
    assert (
        parse("draft:llama-3.2-1b,accept=0.5,k=2").text == "draft:llama-3.2-1b,k=2,accept=0.5/0.5"
    )


@pytest.mark.parametrize(
    "text,word",
    [
        ("medusa", "kind 'medusa'"),
        ("draft", "needs its model"),
        ("eagle3:foo", "only 'draft'"),
        ("draft:x,k=0", "k=0"),
        ("draft:x,k=two", "k=two"),
        ("draft:x,accept=1.5", "[0, 1]"),
        ("draft:x,k=3,accept=0.9/0.8", "2 rates for k=3"),
        ("draft:x,accept=high", "accept=high"),
        ("draft:x,top=3", "'top=3'"),
        ("draft:x,k=2,k=3", "each at most once"),
    ],
)
def test_parse_errors_name_the_part(text, word):
    with pytest.raises(ConfigError, match="^spec_decode=") as exc:  # as Python callers write it
        parse(text)
    assert word in str(exc.value)


def test_workload_takes_the_canonical_spelling():
    assert pa.Workload(spec_decode="draft:llama-3.2-1b").spec_decode == "draft:llama-3.2-1b,k=4"


# --- drawn rounds, by hand --------------------------------------------------------------------

FLAT = np.full(64, 1.0)  # 1 s of drafting and 1 s of verifying at every context


def test_all_accepted_gives_k_plus_one_tokens_a_round():
    r = draw_rounds([Profile("all", (1.0,) * 3)], FLAT, FLAT, tokens=40, n=5)
    # 10 rounds of 4 tokens, 2 s each: 2 tok/s for every sequence
    assert r.tokens_per_round_mean == 4 and r.rounds == 50
    assert np.allclose(r.tokens_per_s, 40 / 20)


def test_none_accepted_gives_one_token_a_round():
    r = draw_rounds([Profile("none", (0.0,) * 3)], FLAT, FLAT, tokens=10, n=3)
    assert r.tokens_per_round_mean == 1 and np.allclose(r.tokens_per_s, 0.5)


def test_a_last_round_cut_short_costs_its_whole_time_per_token():
    # 7 tokens, every draft kept (k = 3, 4 tokens a round): rounds of 4 and 3 tokens, 2 s each:
    # 4 s for 7 tokens, 4/7 s a token (a round's 2 s over its 4 tokens would say 0.5 s)
    r = draw_rounds([Profile("all", (1.0,) * 3)], FLAT, FLAT, tokens=7, n=2)
    assert r.tokens_per_round_mean == 4 and np.allclose(r.tokens_per_s, 7 / 4)
    assert r.time_per_token_s == pytest.approx(4 / 7, rel=1e-12)


def test_seed_fixes_the_draws_and_another_seed_moves_p10():
    prof = [Profile("a", (0.8, 0.7, 0.6)), Profile("b", (0.4, 0.4, 0.4))]
    one = draw_rounds(prof, FLAT, FLAT, tokens=32, seed=0)
    again = draw_rounds(prof, FLAT, FLAT, tokens=32, seed=0)
    other = draw_rounds(prof, FLAT, FLAT, tokens=32, seed=1)
    assert np.array_equal(one.tokens_per_s, again.tokens_per_s)
    assert one.percentile(10) != other.percentile(10)


def test_published_profiles_come_with_their_source():
    cfg = pa.load_model

    def profiles(text, target):
        return acceptance_profiles(parse(text), cfg(target), None)

    got, source = profiles("draft:llama-3.2-1b,k=3", "llama-3.3-70b")
    assert len(got) == 5 and all(len(p.rates) == 3 for p in got)
    assert "arXiv 2503.01840" in source
    # DeepSeek-V3's own MTP rows win over the generic ones
    mtp, source = profiles("mtp,k=1", "deepseek-v3")
    assert sorted(p.rates for p in mtp) == [(0.85,), (0.90,)] and "2412.19437" in source
    # ... while they publish all k positions; past that, rows of other targets that do
    mtp3, _ = profiles("mtp,k=3", "deepseek-v3")
    assert [p.rates[:3] for p in mtp3] == [(0.873, 0.778, 0.675), (0.757, 0.794, 0.828)]
    # positions beyond the published ones keep the last rate
    (longer,) = profiles("draft:x,k=6", "tiny-llama")[0][:1]
    assert longer.rates == (0.559,) * 6


# --- whole runs ---------------------------------------------------------------------------------


def _spec_run(spec: str, system="h200", units=1, model="llama-3.1-8b", tokens=32, **work):
    w = pa.Workload(context=256, tokens=tokens, spec_decode=spec, **work)
    return run(model, system, units, w)


def _plain(system="h200", units=1, model="llama-3.1-8b", tokens=32, **work):
    return run(model, system, units, pa.Workload(context=256, tokens=tokens, **work))


def test_accept_one_is_k_plus_one_tokens_and_the_drafter_costs():
    res = _spec_run("draft:llama-3.2-1b,k=3,accept=1")
    r = res.spec.rounds
    assert r.tokens_per_round_mean == 4 and r.draft_s_mean > 0
    # the round's time is the drafter's 3 steps plus one verification of 4 tokens
    plain = _plain().trace.step_time_s
    assert r.verify_s_mean >= plain


def test_step_time_is_the_time_per_delivered_token_when_tokens_are_not_whole_rounds():
    """Every draft kept, k = 3: 30 tokens are 7 rounds of 4 and one of 2. The step time is the
    8 rounds' time over 30 tokens, 1 / the tokens/s per user (it was a round's time over 4)."""
    res = _spec_run("draft:llama-3.2-1b,k=3,accept=1", tokens=30)
    rec = run_record(res, _report(res))
    assert rec.step_time_s * rec.tokens_per_s_per_user == pytest.approx(1.0, rel=1e-9)


def test_accept_zero_is_never_faster_than_no_speculation():
    res = _spec_run("draft:llama-3.2-1b,k=3,accept=0")
    rec = run_record(res, _report(res))
    assert rec.tokens_per_s_per_user <= _plain().trace.tokens_per_s_per_user
    assert res.spec.rounds.tokens_per_round_mean == 1


def _report(res):
    from pyaccel.report import Report

    return Report.from_trace(res.trace, ())


def test_record_has_the_distribution_and_spec_object():
    res = _spec_run("draft:llama-3.2-1b,k=4")
    d = run_record(res, _report(res)).to_dict()
    assert d["tokens_per_s_per_user_p10"] < d["tokens_per_s_per_user_p50"]
    assert d["tokens_per_s_per_user_p50"] < d["tokens_per_s_per_user_p90"]
    spec = d["spec_decode"]
    assert spec["kind"] == "draft" and spec["k"] == 4 and len(spec["acceptance"]) == 4
    assert 1 < spec["tokens_per_round_mean"] < 5 and spec["sequences"] == 200
    assert any(a.startswith("spec.serial_round") for a in d["assumptions"])
    assert d["emulated_over_lower_bound"] >= 1


def test_a_speculative_trace_says_what_its_timeline_holds(tmp_path):
    """Its Perfetto file holds the target's verification steps back to back (k + 1 = 5 tokens
    each, no drafting): the file's metadata and the trace's meta say so."""
    res = _spec_run("draft:llama-3.2-1b,k=4")
    meta = json.loads(res.trace.to_perfetto(tmp_path / "t.json").read_text())["metadata"]
    assert meta["timeline"] == res.trace.meta["timeline"]
    assert meta["timeline"].startswith(
        f"speculative run: the target's {res.workload.tokens} verification steps of 5 tokens"
    )
    plain = run("tiny-llama", "h100", 1, pa.Workload(context=16, tokens=2))
    assert "timeline" not in plain.trace.perfetto_events()["metadata"]


def test_same_seed_same_result_other_seed_other_p10():
    a = _spec_run("draft:llama-3.2-1b,k=4", seed=3).spec.rounds
    b = _spec_run("draft:llama-3.2-1b,k=4", seed=3).spec.rounds
    c = _spec_run("draft:llama-3.2-1b,k=4", seed=4).spec.rounds
    assert np.array_equal(a.tokens_per_s, b.tokens_per_s)
    assert a.percentile(10) != c.percentile(10)


def test_drafter_must_share_the_vocabulary():
    with pytest.raises(ConfigError, match="vocabulary"):
        _spec_run("draft:tiny-llama,k=2", model="llama-3.1-8b")


def test_an_unknown_drafter_is_named_as_the_drafter():
    with pytest.raises(ConfigError, match=r"^spec_decode='draft:no-such-model': unknown model"):
        _spec_run("draft:no-such-model")


def test_drafter_and_target_must_fit_together():
    # llama-3.1-70b in bf16 at context 16,000 leaves ~90 MB of each H100's HBM (TP 2); the
    # drafter's 1.2 GB share of weights no longer fits beside it
    w = pa.Workload(context=16_000, tokens=4, weights="bf16", spec_decode="draft:llama-3.2-1b")
    with pytest.raises(CapacityError, match="drafter llama-3.2-1b does not fit beside the target"):
        run("llama-3.1-70b", "h100", 2, w)


def test_place_lays_out_the_target_as_a_speculative_run_does():
    """llama-3.1-70b in fp8 fits one H100 alone, not beside llama-3.2-1b: place --spec-decode
    gives the units run uses (it said 1 and ignored the drafter), and refuses a count too small
    as run does."""
    from typer.testing import CliRunner

    from pyaccel.cli import app

    args = ["place", "--system", "h100", "--model", "llama-3.1-70b", "--weights", "fp8",
            "--spec-decode", "draft:llama-3.2-1b"]  # fmt: skip
    got = CliRunner().invoke(app, [*args, "--json"])
    w = pa.Workload(weights="fp8", tokens=4, spec_decode="draft:llama-3.2-1b")
    assert json.loads(got.stdout)["units"] == run("llama-3.1-70b", "h100", "auto", w,
                                                  prefill=None).placement.n_units == 2  # fmt: skip
    small = CliRunner().invoke(app, [*args, "--units", "1"])
    assert small.exit_code == 2 and "drafter llama-3.2-1b does not fit" in small.stderr
    assert "--spec-decode: the unit count" in CliRunner().invoke(app, args).stdout


def test_compare_s_table_says_its_runs_speculate():
    from typer.testing import CliRunner

    from pyaccel.cli import app

    got = CliRunner().invoke(app, ["compare", "--model", "tiny-llama", "--systems", "h100",
                                   "--context", "16", "--tokens", "2",
                                   "--spec-decode", "draft:tiny-llama,k=2,accept=1"])  # fmt: skip
    assert got.exit_code == 0 and "--spec-decode draft:tiny-llama,k=2" in got.stdout


# --- units and energy: the drafter's own units count ----------------------------------------


def _spec_result(own: int, target: int, draft_bound_s: float = 0.0):
    """A speculative result of eagle3 k=3 whose rounds take 1 ms drafting and 2 ms verifying
    and yield 2 tokens on average: 1.5 ms a token."""
    rounds = Rounds(np.array([2 / 3e-3]), 2.0, 1e-3, 2e-3, 1, 1.5e-3)
    return SpecResult(parse("eagle3,k=3"), (0.5,) * 3, "given", rounds, drafter_units=own,
                      target_units=target, draft_bound_s=draft_bound_s)  # fmt: skip


def test_summary_bound_counts_a_round_s_drafting():
    # a round drafts (at least 0.5 ms), verifies (at least 1 ms) and yields at most k + 1 = 4
    # tokens: (0.5 + 1) / 4 = 0.375 ms a token; without the drafting it was 1 / 4 = 0.25 ms
    out, _ = speculative_summary(_verify_summary(4), _spec_result(0, 4, draft_bound_s=0.5e-3))
    assert out["lower_bound_step_time_s"] == pytest.approx(0.375e-3, rel=1e-12)
    assert out["lower_bound_step_time_s"] <= out["step_time_s"]


def _verify_summary(units: int, watts: float = 300.0, step_s: float = 2e-3) -> dict:
    # one verification step of batch 1 on `units` chips of `watts` each: units x W x step J
    return {"units": units, "batch": 1, "step_time_s": step_s, "lower_bound_step_time_s": 1e-3,
            "joules_per_token": units * watts * step_s, "tokens_per_s_per_user": 1 / step_s,
            "tokens_per_s": 1 / step_s}  # fmt: skip


def test_summary_counts_the_drafter_s_own_units_and_their_energy():
    # 40 target chips + 2 drafter chips of 300 W over 1.5 ms a token: 42 x 300 x 1.5e-3 = 18.9 J
    # (the target alone: 40 x 300 x 1.5e-3 = 18.0 J, what was reported before)
    out, extra = speculative_summary(_verify_summary(40), _spec_result(own=2, target=40))
    assert out["units"] == 42 and extra["spec_decode"]["target_units"] == 40
    assert out["step_time_s"] == pytest.approx(1.5e-3, rel=1e-12)
    assert out["joules_per_token"] == pytest.approx(18.9, rel=1e-12)


def test_summary_of_a_drafter_sharing_the_target_s_units_is_unchanged():
    # 4 GPUs of 700 W shared by target and drafter, 1.5 ms a token: 4 x 700 x 1.5e-3 = 4.2 J
    out, extra = speculative_summary(_verify_summary(4, 700.0), _spec_result(own=0, target=4))
    assert out["units"] == 4 and extra["spec_decode"]["target_units"] == 4
    assert out["joules_per_token"] == pytest.approx(4.2, rel=1e-12)


@pytest.mark.parametrize(
    "system,spec,own,watts",
    [
        # llama-3.2-1b at hc1 is 954 MB of ROM; a die of HC1's design holds 5.85 GB of it
        # (--etch): one die of its own beside the target's one; 200 W a card
        ("taalas-hc1", "draft:llama-3.2-1b", 1, 200.0),
        # llama-3.1-8b's EAGLE-3 head: 3h^2 + 6144 x 2h + h^2 + 3 x 14336h + 32000h = 424.7 M
        # weights (h = 4096), 424.86 MB in int8 with its scales; a chip holds 230.69 MB of
        # SRAM: 2 chips of their own; 300 W a chip
        ("groq-tsp", "eagle3", 2, 300.0),
        # an H100's drafter shares the target's GPUs: none of its own; 700 W a GPU
        ("h100", "eagle3", 0, 700.0),
    ],
)
def test_run_record_units_and_energy_count_the_drafter_s_own_units(system, spec, own, watts):
    res = _spec_run(spec, system=system, units="auto", tokens=8)
    rec = run_record(res, _report(res)).to_dict()
    target = res.placement.n_units
    assert rec["spec_decode"]["drafter"]["own_units"] == own
    assert rec["spec_decode"]["target_units"] == target
    assert rec["units"] == target + own
    # (target + own) units x watts x the time per token, batch 1
    want = (target + own) * watts * rec["step_time_s"]
    assert rec["joules_per_token"] == pytest.approx(want, rel=1e-12)
    # the bound counts the drafting too, and stays a bound
    spec = res.spec
    assert spec.draft_bound_s > 0
    verify_lb = res.trace.lower_bound_step_time_s
    want_lb = (spec.draft_bound_s + verify_lb) / (spec.request.k + 1)
    assert rec["lower_bound_step_time_s"] == pytest.approx(want_lb, rel=1e-12)
    assert rec["lower_bound_step_time_s"] <= rec["step_time_s"]
