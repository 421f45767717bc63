"""Functional executor: the decode step computed as the placement lays it out, in the machine's
number formats, accumulation width and reduction order; compared with the fp32 reference (SPEC §4).

What depends on the machine kind (``placement.kind``) -- how a layer's matmul inputs are split
over its units (the layer's ``LayerSlot``), how partial sums are added, how activations are
quantised on the way in -- is asked of that kind's :class:`~pyaccel.numerics.executor.Executor`
(one module per kind in ``numerics/executors/``, named in the kind registry ``hw/kinds.py``); this
module runs the decode through the placement, calls the reference ops and checks finiteness.

Products of bf16 operands are exact in fp32, so "bf16 products, fp32 accumulation" is an fp32
matmul of bf16-rounded operands.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..formats import FORMATS
from .codecs import decode, encode, quantize, round_bf16
from .executors import executor_for
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
    ``[parts, chunk, n]``; ``act_fmt`` names the activation quantisation ("" = bf16);
    ``matmul`` is the kind's own datapath on the packed weights (``Executor.custom_matmul``),
    used instead of ``weight`` when set."""

    act_fmt: str
    weight: np.ndarray | None
    parts: int
    chunk: int
    bias: np.ndarray | None
    matmul: Callable[[np.ndarray], np.ndarray] | None


class MachineNumerics(Numerics):
    """The decode's ops computed as ``placement`` lays them out on ``system``: the workload's
    formats, and the placement kind's arithmetic (``self.machine``, an ``Executor`` built with
    ``options``) for splits, partial sums and activation operands."""

    def __init__(self, weights, graph, system, placement, **options):
        super().__init__(weights)
        self.graph, self.system, self.placement = graph, system, placement
        self.machine = executor_for(placement.kind)(graph, system, placement, **options)
        work = graph.workload
        self.weights_fmt = work.weights_format
        self.expert_fmt = work.expert_weights_format or work.weights_format
        self.kv_fmt = work.kv_format
        self._plans: dict = {}
        # activations are stored as bf16 by act(); only an fp32/fp16 KV cache feeds a matmul
        # (MLA's kv_b_proj) values that need rounding to the bf16 operand
        self._round_inputs = self.kv_fmt.name in ("fp32", "fp16")
        self._parts: dict = {}
        self.label = self.machine.describe()

    # -- what the machine does -------------------------------------------------------------

    def _fmt_for(self, name: str, role: str):
        if role == "router" or name == "model.embed_tokens":
            return FORMATS["bf16"]
        return self.expert_fmt if role == "expert" else self.weights_fmt

    def _k_parts(self, layer) -> int:
        """How many ways a matmul's inputs are split for ``layer`` (1 = not split)."""
        if layer not in self._parts:
            n = self.machine.input_parts(self.placement.slot(layer))
            self._parts[layer] = max(1, n)
        return self._parts[layer]

    def act(self, x: np.ndarray) -> np.ndarray:
        """Activations are stored as bf16 between ops."""
        return round_bf16(x)

    def kv(self, x: np.ndarray) -> np.ndarray:
        """The KV cache in the workload's ``--kv`` format (per-token scales where it has any)."""
        if self.kv_fmt.name == "bf16":
            return round_bf16(x)
        flat = x.reshape(-1, x.shape[-1])  # the codecs take 2-D tensors (rows of one token)
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
        matmul = self.machine.custom_matmul(fmt, packed)
        if matmul is not None:
            plan = _Plan(fmt.name, None, 1, 0, bias, matmul)
        else:
            wq = decode(packed)
            parts = self._k_parts(_layer_key(name))
            if not self.machine.splits_inputs(split):
                parts = 1  # e.g. a column split leaves each output on one rank
            parts = min(parts, wq.shape[1])
            if parts == 1:
                weight, chunk = np.ascontiguousarray(wq.T), 0
            else:
                chunk = math.ceil(wq.shape[1] / parts)
                wq = np.pad(wq, ((0, 0), (0, chunk * parts - wq.shape[1])))
                # [parts, chunk, n]: part p multiplies inputs p*chunk .. p*chunk+chunk-1
                split_w = wq.reshape(wq.shape[0], parts, chunk).transpose(1, 2, 0)
                weight = np.ascontiguousarray(split_w)
            act_fmt = self.machine.activation_format(fmt)
            plan = _Plan(act_fmt, weight, parts, chunk, bias, None)
        self._plans[key] = plan
        return plan

    def linear(self, x: np.ndarray, name: str, split: str, role: str) -> np.ndarray:
        plan = self._plan(name, split, role)
        if plan.matmul is not None:
            y = plan.matmul(x)
        else:
            # the activation operand: quantised per token where the machine multiplies the
            # format natively (Executor.activation_format), else bf16
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
                y = self.machine.reduce(np.matmul(xs, plan.weight))
        if plan.bias is not None:
            y = y + plan.bias
        return check_finite(y.astype(np.float32, copy=False), *tensor_site(name), self.label)

    def combine(self, layer: int, expert_ids: list[int], parts: list[np.ndarray]) -> np.ndarray:
        """Routed experts' outputs, summed as the machine does (``Executor.combine``)."""
        return self.machine.combine(self._k_parts(layer), expert_ids, parts)


# ------------------------------------------------------------------------------------------------
# metrics


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def _sequence_lengths(cfg, graph) -> tuple[int, int]:
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


def functional_metrics(cfg, graph, system, placement, weights=None, **numerics_options) -> dict:
    """Run the decode of model ``cfg`` (its ``graph``) numerically through ``placement`` on
    ``system`` and compare with the fp32 reference over a token sequence; returns the SPEC §7
    keys plus details."""
    # non-finite values are caught and named by check_finite; numpy's overflow warnings would
    # only add stray stderr lines
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return _functional_metrics(cfg, graph, system, placement, weights, **numerics_options)


def _functional_metrics(cfg, graph, system, placement, weights, **numerics_options) -> dict:
    check_supported(cfg)
    if weights is None:
        weights = load_weights(cfg, SEED)
    n_prompt, n_gen = _sequence_lengths(cfg, graph)
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
        functional_assumptions=[*FUNCTIONAL_ASSUMPTIONS, *nx.machine.ASSUMPTIONS],
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
