"""Functional executor: the decode step computed as the placement lays it out, in the machine's
number formats, accumulation width and reduction order; compared with the fp32 reference (SPEC §4).

Per machine kind (``placement.kind``; the layer's ``LayerSlot`` gives its units and region):

- ``gpu``: each tensor-parallel rank holds its slice of every op. Column-split ops (q/k/v, gate/up,
  the LM head) compute each output on one rank, so splitting does not change their values.
  Row-split ops (``o_proj``, ``down_proj``) give each rank a partial sum over its share of the
  inputs (fp32 accumulation, bf16 GEMM output) and a ring all-reduce adds the ranks' bf16 partials
  in rank order, rounding to bf16 after every add (NCCL reduces in the tensor's dtype). Routed
  experts live on ranks in contiguous blocks; each rank sums its experts' outputs and the ranks are
  all-reduced the same way. Weight-only formats (int4, mxfp4 or nvfp4 on a GPU without FP4 tensor
  cores, hc1) are dequantised to bf16 operands; formats the GPU multiplies natively (fp8, int8,
  fp4 when ``fp4_flops_per_s > 0``) quantise the activations too (per token).
- ``asic``: each layer's block multiplies its etched integer weights (``hc1``: 3/6-bit codes with
  a per-channel scale) by activations quantised to int8 per token, accumulates exactly in integers
  and rescales once per output. Float formats on an asic use the gpu rule without partitions.
- ``wafer`` (generic fallback until the wafer placer's regions are final): every matmul is tiled
  over the layer's PE rectangle ``rect = [x0, y0, w, h]`` (or an interleave ``grid = [P, P]``); the
  inputs are split into ``w`` column chunks, each PE column accumulates its chunk in fp32 and the
  partial sums are reduced along the row in chain order (left to right), as MeshGEMV's pipelined
  reduction does. Without a rectangle the op is computed on one PE group (stated in the output).
- ``lpu`` (generic fallback): a layer spread over ``n`` chips splits each matmul's inputs ``n`` ways
  (fp32 partial sums added in chip order).

Products of bf16 operands are exact in fp32, so "bf16 products, fp32 accumulation" is an fp32
matmul of bf16-rounded operands.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from ..formats import FORMATS
from .codecs import bf16_decode, decode, encode, quantize, round_bf16
from .reference import DecodeModel, Numerics, check_finite, tensor_site
from .weights import check_supported, load_weights

FUNCTIONAL_ASSUMPTIONS = (
    "numerics.sequence: metrics over a seeded 8-token prompt plus min(--tokens, 32) tokens the "
    "fp32 reference generates greedily; the machine is teacher-forced on that sequence",
    "numerics.random_model: without safetensors in the model folder, weights are a seeded random "
    "model (matrices N(0, 1/fan_in), norms 1 + N(0, 0.01))",
    "numerics.activations_bf16: activations are stored as bf16 between ops on every machine "
    "(the graph's byte model); the fp32 reference keeps fp32",
    "numerics.gpu_allreduce_bf16: tensor-parallel all-reduce adds bf16 partials in rank order, "
    "rounding to bf16 after each add (NCCL reduces in the tensor dtype)",
    "numerics.asic_int8_activations: HC1 multiplies its 3/6-bit etched weights by int8 "
    "activations (per-token symmetric scale) with exact integer accumulation; the activation "
    "format is not public (bf16 activations would move the logits less)",
    "numerics.round_to_nearest: weights are quantised round-to-nearest from the checkpoint with "
    "the format's scale rule (no GPTQ/AWQ-style calibration), an upper bound on a calibrated "
    "quantiser's error",
    "numerics.wafer_chain_reduce: wafer GEMV partial sums are reduced along the PE row in chain "
    "order, fp32, one partial per PE column of the layer's rectangle",
)
# HC1's activation width (named assumption numerics.asic_int8_activations); 0 = bf16 operands
ASIC_ACT_BITS = 8
PROMPT_TOKENS = 8
MAX_FUNCTIONAL_TOKENS = 32
SEED = 0

_LAYER = re.compile(r"model\.layers\.(\d+)\.")


def _layer_key(name: str):
    m = _LAYER.match(name)
    return int(m.group(1)) if m else "head"


@dataclass(frozen=True)
class _Plan:
    """One weight op on one machine: ``weight`` is ``[k, n]`` (``parts == 1``) or
    ``[parts, chunk, n]``; ``act_fmt`` names the activation quantisation ("" = bf16); ``ints``
    holds (integer codes ``[k, n]`` as float64, per-row scale) for integer datapaths."""

    act_fmt: str
    weight: np.ndarray | None
    parts: int
    chunk: int
    bias: np.ndarray | None
    ints: tuple | None


def _integer_matmul(
    x: np.ndarray, codes_t: np.ndarray, row_scale: np.ndarray, act_bits: int = 8
) -> np.ndarray:
    """Per-token symmetric ``act_bits`` activations times integer weight codes, summed exactly,
    rescaled once per output."""
    qmax = np.float32((1 << (act_bits - 1)) - 1)
    amax = np.max(np.abs(x), axis=-1, keepdims=True).astype(np.float32)
    s = np.where(amax > 0, amax / qmax, np.float32(1)).astype(np.float32)
    q = np.clip(np.rint(x / s), -qmax, qmax).astype(np.float64)
    acc = q @ codes_t  # exact: integer products and sums far below 2^53
    return (acc.astype(np.float32) * s) * row_scale


class MachineNumerics(Numerics):
    """Arithmetic of one machine kind on one placement (see the module docstring)."""

    def __init__(self, weights, graph, system, placement, asic_act_bits: int = ASIC_ACT_BITS):
        super().__init__(weights)
        self.asic_act_bits = asic_act_bits
        self.graph, self.system, self.placement = graph, system, placement
        self.kind = placement.kind
        work = graph.workload
        self.weights_fmt = work.weights_format
        self.expert_fmt = work.expert_weights_format or work.weights_format
        self.kv_fmt = work.kv_format
        self._plans: dict = {}
        # activations are stored as bf16 by act(); only an fp32/fp16 KV cache feeds a matmul
        # (MLA's kv_b_proj) values that need rounding to the bf16 operand
        self._round_inputs = self.kv_fmt.name in ("fp32", "fp16")
        self._parts: dict = {}
        self.label = self._describe()

    # -- what the machine does -------------------------------------------------------------

    def _describe(self) -> str:
        layout = self.placement.layout
        if self.kind == "gpu":
            return f"gpu: TP {layout.get('tp', 1)} ranks x PP {layout.get('pp', 1)} stages"
        if self.kind == "asic":
            return "asic: one etched block per layer, integer accumulation"
        if self.kind == "wafer":
            widths = sorted({self._k_parts(s.layer) for s in self.placement.layers})
            return f"wafer: GEMV inputs split over {widths} PE columns, chain reduction"
        return f"{self.kind}: inputs split over the layer's {self.kind} units, fp32 partials"

    def _fmt_for(self, name: str, role: str):
        if role == "router" or name == "model.embed_tokens":
            return FORMATS["bf16"]
        return self.expert_fmt if role == "expert" else self.weights_fmt

    def _native(self, compute: str) -> bool:
        """True when the GPU's tensor cores multiply this compute format natively."""
        p = self.system.spec.params
        rate = {"fp8": "fp8_flops_per_s", "int8": "int8_ops_per_s", "fp4": "fp4_flops_per_s"}
        return compute in rate and float(getattr(p, rate[compute], 0) or 0) > 0

    def _k_parts(self, layer) -> int:
        """How many ways a matmul's inputs are split for ``layer`` (1 = not split)."""
        if layer in self._parts:
            return self._parts[layer]
        slot = self.placement.slot(layer)
        n = 1
        if self.kind in ("gpu", "lpu"):
            n = len(slot.units)
        elif self.kind == "wafer":
            region = slot.region or {}
            if "rect" in region:
                n = int(region["rect"][2])
            elif "grid" in region:
                n = int(region["grid"][0])
        self._parts[layer] = max(1, n)
        return self._parts[layer]

    def act(self, x: np.ndarray) -> np.ndarray:
        """Activations are stored as bf16 between ops."""
        return round_bf16(x)

    def kv(self, x: np.ndarray) -> np.ndarray:
        """The KV cache in the workload's ``--kv`` format (per-token scales where it has any)."""
        if self.kv_fmt.name in ("bf16", "fp32", "fp16"):
            return quantize(x, self.kv_fmt.name) if self.kv_fmt.name != "bf16" else round_bf16(x)
        flat = x.reshape(-1, x.shape[-1])
        return quantize(flat, self.kv_fmt.name).reshape(x.shape)

    # -- linear ops ----------------------------------------------------------------------------

    def _plan(self, name: str, split: str, role: str) -> _Plan:
        """How this machine computes one weight tensor's op; built once per tensor."""
        key = (name, split)
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        fmt = self._fmt_for(name, role)
        w = self.w[name + ".weight"]
        bias = self.w[name + ".bias"] if (name + ".bias") in self.w else None
        bias = None if bias is None else round_bf16(bias)
        packed = encode(w, fmt.name, fmt.bits_for(role))
        if self.kind == "asic" and fmt.name in ("hc1", "int8") and self.asic_act_bits:
            ints = (
                packed.codes().T.astype(np.float64),
                bf16_decode(packed.row_scales),
                self.asic_act_bits,
            )
            plan = _Plan(fmt.name, None, 1, 0, bias, ints)
        else:
            wq = decode(packed)
            parts = self._k_parts(_layer_key(name))
            if self.kind == "gpu" and split != "row":
                parts = 1  # column/vocab/head/expert splits leave each output on one rank
            parts = min(parts, wq.shape[1])
            if parts == 1:
                weight, chunk = np.ascontiguousarray(wq.T), 0
            else:
                chunk = math.ceil(wq.shape[1] / parts)
                wq = np.pad(wq, ((0, 0), (0, chunk * parts - wq.shape[1])))
                # [parts, chunk, n]: part p multiplies inputs p*chunk .. p*chunk+chunk-1
                split_w = wq.reshape(wq.shape[0], parts, chunk).transpose(1, 2, 0)
                weight = np.ascontiguousarray(split_w)
            quant_act = self.kind == "gpu" and self._native(fmt.compute)
            plan = _Plan(fmt.name if quant_act else "", weight, parts, chunk, bias, None)
        self._plans[key] = plan
        return plan

    def linear(self, x: np.ndarray, name: str, split: str, role: str) -> np.ndarray:
        plan = self._plan(name, split, role)
        if plan.ints is not None:
            y = _integer_matmul(x, *plan.ints)
        else:
            # the activation operand: quantised per token where the GPU multiplies the format
            # natively (fp8, int8, fp4 on Blackwell), else bf16
            # (inputs arrive as act()/kv() stored them: bf16-exact unless the KV cache is fp32/fp16)
            if plan.act_fmt:
                xq = quantize(x, plan.act_fmt)
            else:
                xq = round_bf16(x) if self._round_inputs else x
            if plan.parts == 1:
                y = xq @ plan.weight
            else:
                k = xq.shape[-1]
                if plan.chunk * plan.parts != k:  # ragged last part: zero-fill (adds +0)
                    full = np.zeros((xq.shape[0], plan.chunk * plan.parts), np.float32)
                    full[:, :k] = xq
                    xq = full
                xs = xq.reshape(xq.shape[0], plan.parts, plan.chunk).transpose(1, 0, 2)
                # [parts, tokens, n]: each part's partial sum accumulated in fp32
                y = self._reduce(np.matmul(xs, plan.weight))
        if plan.bias is not None:
            y = y + plan.bias
        return check_finite(y.astype(np.float32, copy=False), *tensor_site(name), self.label)

    def _reduce(self, partials: np.ndarray) -> np.ndarray:
        """Sum partials (axis 0) in the machine's order and width."""
        if self.kind == "gpu":
            acc = round_bf16(partials[0])
            for p in partials[1:]:
                acc = round_bf16(acc + round_bf16(p))
            return acc
        return np.cumsum(partials, axis=0, dtype=np.float32)[-1]  # chain order, fp32

    def combine(self, layer: int, expert_ids: list[int], parts: list[np.ndarray]) -> np.ndarray:
        """Routed experts' outputs: per-rank fp32 sums, then the all-reduce (gpu)."""
        if self.kind != "gpu":
            return super().combine(layer, expert_ids, parts)
        tp = self._k_parts(layer)
        n_exp = self.graph.model.n_experts
        ranks: dict[int, np.ndarray] = {}
        for e, p in zip(expert_ids, parts):
            r = e * tp // n_exp
            ranks[r] = ranks[r] + p if r in ranks else p
        partials = np.stack([ranks[r] for r in sorted(ranks)])
        return self._reduce(partials)


# ------------------------------------------------------------------------------------------------
# metrics


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def _sequence_lengths(graph) -> tuple[int, int]:
    cfg = graph.model
    n_gen = min(graph.workload.tokens, MAX_FUNCTIONAL_TOKENS)
    limit = cfg.max_position or (PROMPT_TOKENS + n_gen)
    return PROMPT_TOKENS, max(1, min(n_gen, limit - PROMPT_TOKENS))


def reference_run(cfg, weights, n_prompt: int, n_gen: int, seed: int = SEED):
    """(token sequence, fp32 logits [n_gen, vocab]): a seeded prompt then greedy generation."""
    prompt = list(np.random.default_rng(seed).integers(0, cfg.vocab, n_prompt))
    model = DecodeModel(cfg, Numerics(weights), max_len=n_prompt + n_gen)
    seq, out = [int(t) for t in prompt], []
    for t in range(n_prompt + n_gen - 1):
        logits = model.step([seq[t]])[0]
        if t >= n_prompt - 1:
            out.append(logits)
            if len(seq) < n_prompt + n_gen:
                seq.append(int(np.argmax(logits)))
    return seq, np.stack(out)


def machine_logits(model: DecodeModel, seq: list[int], n_prompt: int) -> np.ndarray:
    """The machine's logits at the positions the reference generated, teacher-forced."""
    out = []
    for t in range(len(seq) - 1):
        logits = model.step([seq[t]])[0]
        if t >= n_prompt - 1:
            out.append(logits)
    return np.stack(out)


def compare(ref: np.ndarray, got: np.ndarray, targets: list[int]) -> dict:
    """top-1 agreement, max/mean |delta logit| and perplexity ratio of ``got`` vs ``ref``."""
    idx = np.arange(len(targets))
    nll_ref = -_log_softmax(ref)[idx, targets]
    nll_got = -_log_softmax(got)[idx, targets]
    diff = np.abs(got.astype(np.float64) - ref)
    return {
        "top1_agreement": float(np.mean(np.argmax(ref, -1) == np.argmax(got, -1))),
        "max_abs_logit_error": float(diff.max()),
        "mean_abs_logit_error": float(diff.mean()),
        "perplexity_ratio": float(np.exp(nll_got.mean() - nll_ref.mean())),
        "reference_perplexity": float(np.exp(nll_ref.mean())),
    }


def functional_metrics(graph, system, placement, weights=None, **numerics_options) -> dict:
    """Run the decode numerically through ``placement`` on ``system`` and compare with the fp32
    reference over a token sequence; returns the SPEC §7 keys plus details."""
    # non-finite values are caught and named by check_finite; numpy's overflow warnings would
    # only add stray stderr lines
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return _functional_metrics(graph, system, placement, weights, **numerics_options)


def _functional_metrics(graph, system, placement, weights, **numerics_options) -> dict:
    cfg = graph.model
    check_supported(cfg)
    if weights is None:
        weights = load_weights(cfg, SEED)
    n_prompt, n_gen = _sequence_lengths(graph)
    seq, ref = reference_run(cfg, weights, n_prompt, n_gen)
    nx = MachineNumerics(weights, graph, system, placement, **numerics_options)
    got = machine_logits(DecodeModel(cfg, nx, max_len=len(seq)), seq, n_prompt)
    free = DecodeModel(cfg, nx, max_len=len(seq))
    generated = _generate(free, seq[:n_prompt], n_gen)
    work = graph.workload
    out = compare(ref, got, seq[n_prompt:])
    out.update(
        functional_tokens=n_gen,
        reference_tokens=seq[n_prompt:],
        generated_tokens=generated,
        functional_partition=nx.label,
        functional_formats={
            "weights": work.weights,
            "expert_weights": work.expert_weights or work.weights,
            "kv": work.kv,
        },
        functional_weights="safetensors" if not isinstance(weights, dict) else "seeded random",
        functional_assumptions=list(FUNCTIONAL_ASSUMPTIONS),
    )
    return out


def _generate(model: DecodeModel, prompt: list[int], n: int) -> list[int]:
    """Greedy tokens a machine generates on its own from ``prompt``."""
    logits = None
    for t in prompt:
        logits = model.step([t])[0]
    out = []
    for _ in range(n):
        tok = int(np.argmax(logits))
        out.append(tok)
        if len(out) < n:
            logits = model.step([tok])[0]
    return out
