"""Speculative decoding's drafter kinds (issue 18): EAGLE-3 heads, MTP modules and block
drafters built from the target, drafters on units of their own (ASIC dies, LPU chips), the
drafting cost per round, and acceptance measured with the functional path."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import pyaccel as pa
from pyaccel.drafters import BLOCK, CHAIN, drafter_for
from pyaccel.errors import CapacityError, ConfigError, PlacementError
from pyaccel.numerics.weights import random_weights, write_safetensors
from pyaccel.results import prepare, run
from pyaccel.spec_decode import parse
from pyaccel.speculate import _draft_times, _place_drafter, acceptance_profiles

from conftest import TINY_LLAMA, write_config


def _graph(cfg, **work):
    return pa.build_graph(cfg, pa.Workload(**work).resolved("bf16"))


def _op(graph, name):
    (op,) = [o for o in graph.ops if o.name == name]
    return op


# --- drafter shapes ---------------------------------------------------------------------------


def test_eagle3_head_of_llama_8b_by_hand(llama8b):
    d = drafter_for("eagle3", None, llama8b)
    cfg, h = d.config, 4096
    assert (cfg.n_layers, cfg.hidden, cfg.vocab, d.mode) == (1, h, 32000, CHAIN)
    g = _graph(cfg)
    # fc: the three fused target states (3h) to h; q/k/v read [embedding; fused state] (2h)
    assert _op(g, "fc").tensors == ((h, 3 * h),)
    assert _op(g, "L0.qkv_proj").tensors == ((h, 2 * h), (1024, 2 * h), (1024, 2 * h))
    # the embedding is the target's (read, not stored); the 32k head is the drafter's own
    assert _op(g, "embed").resident_weight_bytes == 0 and _op(g, "embed").weight_bytes > 0
    assert _op(g, "lm_head").resident_weight_bytes == 32000 * h * 2
    params = 3 * h * h + 6144 * 2 * h + h * h + 2 * 14336 * h + 14336 * h + 32000 * h
    assert g.param_count == params + 3 * h  # + the three norms


def test_mtp_module_of_deepseek_v3_is_one_moe_layer_sharing_the_tables():
    target = pa.load_model("deepseek-v3")
    d = drafter_for("mtp", None, target)
    cfg = d.config
    assert cfg.n_layers == 1 and not cfg.is_dense_layer(0) and cfg.n_experts == 256
    g = _graph(cfg)
    assert _op(g, "fc").tensors == ((7168, 2 * 7168),)  # eh_proj over [embedding; hidden]
    for name in ("embed", "lm_head"):  # the target's tables, read every draft step
        assert _op(g, name).resident_weight_bytes == 0 and _op(g, name).weight_bytes > 0
    # the module is about the 14B of weights DeepSeek-V3's checkpoint adds (671B -> 685B)
    assert 11e9 < g.param_count < 15e9


def test_mtp_needs_mtp_layers_in_the_config(llama8b):
    with pytest.raises(ConfigError, match="no MTP layers"):
        drafter_for("mtp", None, llama8b)


def test_block_drafter_drafts_in_one_pass(llama8b):
    d = drafter_for("block", None, llama8b)
    assert d.mode == BLOCK and d.config.n_layers >= 1
    g = _graph(d.config)
    assert _op(g, "lm_head").resident_weight_bytes == 0  # the target's head


# --- drafting cost per round -----------------------------------------------------------------


def _placed(spec, system="h100", model="llama-3.1-8b", tokens=6):
    p = prepare(model, system, "auto", pa.Workload(context=128, tokens=tokens, spec_decode=spec))
    req = parse(p.workload.spec_decode)
    d = drafter_for(req.kind, req.draft, p.model)
    return p, req, d, _place_drafter(d, req, p.system, p.placement, p.workload)


def _steps(cfg, system, plc, work, **change):
    tr = pa.emulate(cfg, system, plc, replace(work, **change), event_steps=())
    return tr.step_cycles / system.spec.clock_hz


def test_chain_round_is_a_catch_up_step_and_k_minus_one_steps():
    p, req, d, (sysm, work, plc) = _placed("eagle3,k=3")
    got = _draft_times(d, sysm, plc, work, 3, 6)
    wide = _steps(d.config, sysm, plc, work, step_tokens=4, tokens=6)
    one = _steps(d.config, sysm, plc, work, tokens=8)  # one-token steps from the context on
    want = [wide[c] + one[c + 1] + one[c + 2] for c in range(6)]
    assert np.allclose(got, want, rtol=1e-12, atol=0) and (got > 0).all()


def test_block_round_is_one_pass_over_k_plus_one_positions():
    p, req, d, (sysm, work, plc) = _placed("block,k=5")
    got = _draft_times(d, sysm, plc, work, 5, 6)
    assert np.array_equal(got, _steps(d.config, sysm, plc, work, step_tokens=6, tokens=6))


# --- runs of every kind -----------------------------------------------------------------------


@pytest.mark.parametrize("system", ["h100", "wse3", "groq-tsp", "taalas-hc1"])
def test_eagle3_accept_one_gives_k_plus_one_and_costs_its_drafter(system):
    res = run("llama-3.1-8b", system, "auto",
              pa.Workload(context=128, tokens=8, spec_decode="eagle3,k=3,accept=1"))  # fmt: skip
    r = res.spec.rounds
    assert r.tokens_per_round_mean == 4 and r.draft_s_mean > 0
    own = res.spec.drafter_units
    assert own >= 1 if system in ("groq-tsp", "taalas-hc1") else own == 0


def test_asic_drafter_runs_on_dies_etched_for_it():
    p, req, d, (sysm, work, plc) = _placed("draft:llama-3.2-1b,k=2", system="taalas-hc1")
    assert sysm.etch and plc.n_units >= 1 and plc.system == "taalas-hc1"


def test_accept_zero_is_never_faster_on_the_asic():
    w = pa.Workload(context=128, tokens=8)
    plain = run("llama-3.1-8b", "taalas-hc1", "auto", w).trace.tokens_per_s_per_user
    spec = run("llama-3.1-8b", "taalas-hc1", "auto", replace(w, spec_decode="eagle3,accept=0"))
    assert spec.spec.rounds.tokens_per_s.max() < plain


def test_auto_units_grow_until_the_drafter_fits_beside_the_target():
    # 70B in bf16 on H100s, 4 x 100k tokens of cache: 4 GPUs hold it (81.4 of 85.0 GB each);
    # the 1B drafter and its cache beside it need more GPUs
    w = pa.Workload(batch=4, context=100_000, tokens=2, weights="bf16")
    alone = prepare("llama-3.1-70b", "h100", "auto", w).placement.n_units
    res = run("llama-3.1-70b", "h100", "auto", replace(w, spec_decode="draft:llama-3.2-1b"))
    assert res.placement.n_units > alone


# llama-3.1-8b (16.06 GB in bf16) verified, drafted by llama-3.1-70b (141.1 GB) on H100s
# (85.05 GB of HBM each, 11.78 GB of it the runtime's reserve), context 128
BIG_DRAFTER = pa.Workload(context=128, tokens=4, spec_decode="draft:llama-3.1-70b,accept=0.5")


def test_auto_units_fit_a_drafter_larger_than_the_target():
    # 1 GPU: the 70B alone needs 152.93 GB; 2 GPUs (TP 2): 8.556 GB of the target's weights
    # (half of 16.06 GB, the 1.05 GB embedding on both) + 71.606 GB of the drafter's + 11.78
    # GB reserve + 0.031 GB of both caches = 91.97 GB > 85.05; 3 GPUs (TP must divide 8 KV
    # heads: TP 1 x PP 3): the fullest holds 5.23 + 47.92 + 11.78 + 0.02 = 64.95 GB: fits
    res = run("llama-3.1-8b", "h100", "auto", BIG_DRAFTER)
    assert res.placement.n_units == 3 and res.spec.drafter_units == 0
    assert res.spec.target_units == 3


def _big_drafter_error(error, system: str, units: int) -> str:
    """The message of the ``error`` a run of :data:`BIG_DRAFTER` on ``units`` units raises."""
    with pytest.raises(error) as exc:
        run("llama-3.1-8b", system, units, BIG_DRAFTER)
    return str(exc.value)


def test_too_few_units_name_the_drafter_and_the_units_that_hold_both():
    # 2 GPUs: 91.972 - 85.045 = 6.927 GB short (the sum above), the drafter's; the target's
    # cache holds the k = 4 drafted positions its last verification writes: 4 x 65,536 B (8 KV
    # heads x 128 x K and V x 2 B x 32 layers, half on each GPU) = 262,144 B more
    text = _big_drafter_error(CapacityError, "h100", 2)
    assert "the drafter llama-3.1-70b does not fit beside the target on unit 0" in text
    assert "short 6,927,280,384 B (6.93 GB)" in text and "units=3 holds" in text
    # 1 GPU: the drafter alone needs 152.93 GB (reserve included): 152.93 - 85.05 = 67.89 GB short
    text = _big_drafter_error(PlacementError, "h100", 1)
    assert "drafter llama-3.1-70b does not fit on the 1 h100 unit(s) it shares" in text
    assert "short of 67.89 GB" in text and text.endswith(
        "units=3 holds the target and the drafter (units='auto' finds the fewest)"
    )


def test_a_wafer_drafter_needs_no_more_wafers_than_the_target_has():
    # 141.1 GB of the 70B's bf16 weights over 43.42 GB of SRAM a WSE-3: at least 4 wafers, not
    # on 2 wafers of the target's; 4 hold both
    text = _big_drafter_error(CapacityError, "wse3", 2)
    assert "the drafter llama-3.1-70b needs 4 wse3 units even alone" in text
    assert "short 2 unit(s)" in text and "units=4 holds" in text


# --- acceptance measured with the functional path --------------------------------------------


def _noisy_copy(tmp_path, scale: float):
    """tiny-llama's seeded weights plus Gaussian noise, as a model folder."""
    folder = write_config(tmp_path / f"noisy-{scale}", TINY_LLAMA)
    cfg = pa.load_model(str(folder))
    rng = np.random.default_rng(1)
    weights = {
        k: v + scale * np.std(v) * rng.standard_normal(v.shape).astype(np.float32)
        for k, v in random_weights(cfg, 0).items()
    }
    write_safetensors(folder / "model.safetensors", weights)
    return str(folder)


def test_measured_acceptance_of_the_target_itself_is_one():
    target = pa.load_model("tiny-llama")
    profiles, source = acceptance_profiles(parse("draft:tiny-llama,k=3,accept=measured"),
                                           target, target)  # fmt: skip
    assert profiles[0].rates == (1.0, 1.0, 1.0) and "measured" in source


def test_measured_acceptance_falls_with_the_drafter_s_noise(tmp_path):
    target = pa.load_model("tiny-llama")
    rates = []
    for scale in (0.05, 3.0):
        drafter = pa.load_model(_noisy_copy(tmp_path, scale))
        req = parse(f"draft:{drafter.source},k=3,accept=measured")
        rates.append(np.mean(acceptance_profiles(req, target, drafter)[0][0].rates))
    assert 1.0 >= rates[0] > rates[1] >= 0.0


def test_measured_needs_a_drafter_with_weights(llama8b):
    with pytest.raises(ConfigError, match="only draft:MODEL"):
        acceptance_profiles(parse("eagle3,accept=measured"), llama8b, llama8b)


def test_what_if_covers_the_whole_round():
    from pyaccel.speculate import round_what_if

    res = run("llama-3.1-8b", "h100", 1, pa.Workload(context=128, tokens=4, spec_decode="eagle3"))
    per_token = res.spec.rounds.time_per_token_s  # the summary's step time
    rows = round_what_if(res)
    assert rows[0].resource == "hbm" and rows[0].gain > 1.5
    for row in rows:  # each row: the new time per generated token, and the gain it gives
        assert row.step_time_s * row.gain == pytest.approx(per_token, rel=1e-12)
        assert row.gain >= 1.0 - 1e-12


def test_llama_3_1_8b_s_eagle3_head_is_the_published_checkpoint_not_assumed():
    """The [eagle3] source is the head trained for Llama-3.1-8B-Instruct: a run on llama-3.1-8b
    said its shapes were 'assumed from the kind's rule'. Its shapes are the checkpoint's."""
    from pyaccel.drafters import drafter_for

    d = drafter_for("eagle3", None, pa.load_model("llama-3.1-8b"))
    assert not d.assumed and "eagle/traineagle3/config.json" in d.source
    c = d.config
    assert (c.n_layers, c.hidden, c.n_heads, c.n_kv_heads, c.ffn, c.vocab) == (
        1, 4096, 32, 8, 14336, 32000)  # fmt: skip
    assert drafter_for("eagle3", None, pa.load_model("llama-3.1-70b")).assumed


def test_a_drafter_table_entry_without_a_source_is_refused(monkeypatch):
    """An unquoted dotted name ([eagle3.targets.llama-3.1-8b]) nests as tables llama-3 / 1-8b
    and silently matched no target: such an entry has no source and is refused."""
    import pyaccel.drafters as drafters

    text = '[eagle3]\nlayers = 1\n[eagle3.targets.llama-3.1-8b]\nsource = "x"\n'

    class _Files:
        def joinpath(self, name):
            return self

        def read_text(self, encoding):
            return text

    monkeypatch.setattr(drafters.resources, "files", lambda package: _Files())
    with pytest.raises(ConfigError, match=r"\[eagle3.targets.llama-3\] has no source"):
        drafters._table()
