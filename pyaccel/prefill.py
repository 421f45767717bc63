"""Prefill and time to first token: one prompt through the decode placement, chunk by chunk.

A prompt of ``context`` tokens (at least one) is processed as the machine's runtime feeds it:
``prefill_chunk_tokens`` of the sequence a step (the preset's value, sourced or a named
assumption), each chunk a step of ``chunk`` token rows attending causally to the chunks before
it and to each other (``Workload.step_tokens``), so every engine costs it with its own
mechanism: compute-bound GEMMs on GPUs, the rows through the pipeline on wafers and LPUs, the
rows one after another through the ASIC's blocks (each row's attention at its own context). A
chunk's LM head and sampling run on its last row only (``Workload.prefill``: one sampled row a
sequence); the first token comes from the last chunk's. On an engine whose chunks stream
through its pipeline stages (its pass model's ``PREFILL_STREAMS``: wafers, LPUs) the next chunk
enters a stage as soon as the last one has left it, so ``ttft_s`` is the simulated schedule's
end (:func:`pyaccel.sim.pipeline.stream_ends`); elsewhere (GPUs: vLLM schedules a sequence's
next chunk after its step; the ASIC's rows already stream) the chunks run one after another and
``ttft_s`` is the sum of their steps. One sequence arriving at an idle machine: no queueing
behind other requests, no decode steps interleaved.

Units: seconds; tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .emulation import emulate, one_step_cycles
from .report import union_by
from .sim.driver import MicroBatchPasses
from .sim.inputs import engine_module, run_graph
from .sim.pipeline import stream_ends
from .units import cycles

ASSUMPTIONS = (
    "prefill.idle_machine: ttft_s is one sequence's prompt on an idle machine, in chunks of "
    "prefill_chunk_tokens on the decode placement (no queueing, no decode steps of other "
    "sequences interleaved); the first token is the last chunk's",
    "prefill.last_row_logits: a prompt chunk's LM head and sampling run on one row a sequence, "
    "its last; its other rows only fill the KV cache (vLLM's GPU model runner samples each "
    "request's last scheduled token, logits_indices = query_start_loc[1:] - 1, and discards "
    "the token of a partial prefill; SGLang's logits processor keeps each request's last "
    "position). Each chunk, not only the last, computes that row's logits, as vLLM does; the "
    "final norm runs on every row, in the model's forward",
)
STREAMED = (
    "prefill.streamed_chunks: on wafers and LPUs a prompt's chunks stream through the pipeline "
    "stages in order, each entering a stage when the one before has left it and its own input "
    "has crossed into it (the pipeline filled); each chunk's stage cycles are its own pass's"
)
MLA_EXPANDED = (
    "prefill.mla_expanded: an MLA model's prompt chunks run in the expanded (compute-friendly) "
    "form: each chunk up-projects the latents of every key it attends (kv_b_proj) to per-head "
    "keys and values, written and read back once, and runs multi-head attention over them, as "
    "vLLM's MLA backend does for prefill tokens (vllm/v1/attention/backends/mla/common.py); "
    "decode and verification steps stay absorbed"
)
MLA_ABSORBED = (
    "prefill.mla_absorbed: an MLA model's prompt chunks keep decode's absorbed form on this "
    "machine: its prompt runs on the decode mapping (wafers, LPUs: attention over the latent "
    "cache on the units that hold it, which gives no room to the expanded per-head keys and "
    "values, n_heads x (qk_nope + v_head) elements a key, 64x DeepSeek-V3's latent) or a row "
    "at a time (the ASIC: no two rows share an up-projection, and its attention blocks are "
    "etched for the absorbed form)"
)
WHOLE_PROMPT = (
    "prefill.whole_prompt: the machine's preset names no prefill_chunk_tokens, so its prompt "
    "is one prefill step"
)


@dataclass(frozen=True)
class Chunk:
    """One prefill step: ``tokens`` prompt tokens after ``context`` already cached, taking
    ``seconds``; ``resources``: seconds its events cover per resource class."""

    context: int
    tokens: int
    seconds: float
    resources: dict


@dataclass(frozen=True)
class Prefill:
    """A prompt's prefill: its chunks, ``ttft_s`` (s: their steps in turn, or, ``streamed``,
    their schedule through the stages) and, when its events were kept (``resolved``), the
    seconds each resource class is busy over them (overlapping events of one class counted
    once a chunk; streamed chunks overlap one another, so a class's seconds may exceed
    ``ttft_s``)."""

    prompt_tokens: int
    chunk_tokens: int
    chunks: tuple[Chunk, ...]
    ttft_s: float  # time to first token (s)
    streamed: bool = False  # the chunks streamed through the stages (else one after another)
    resolved: bool = False  # each chunk's events were kept: where the time goes is known
    ends_s: tuple[float, ...] = ()  # when each chunk left the last stage (s from the start)
    # with --spec-decode: the drafter's own prefill of the prompt (pyaccel.spec_prefill), its
    # model, whether it ran on units of its own beside the target's (else after it) and when
    # it was done (s from the start)
    drafter: Prefill | None = None
    drafter_model: str = ""
    drafter_own_units: bool = False
    drafter_done_s: float = 0.0

    @property
    def resources(self) -> dict:
        """Seconds each resource class is busy over the whole prefill (the drafter's too),
        largest first."""
        out: dict = {}
        chunks = self.chunks + (self.drafter.chunks if self.drafter else ())
        for c in chunks:
            for name, s in c.resources.items():
                out[name] = out.get(name, 0.0) + s
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    @property
    def busiest_resource(self) -> str:
        """The resource class busy longest over the prefill."""
        return next(iter(self.resources), "")

    def as_dict(self) -> dict:
        """Plain data for JSON: ttft, chunking and the resource seconds (``None``, with the
        busiest resource, when the events were not kept: ``run`` times the prefill only,
        ``report`` says where its time goes)."""
        out = {
            "ttft_s": self.ttft_s,
            "prompt_tokens": self.prompt_tokens,
            "chunk_tokens": self.chunk_tokens,
            "chunks": len(self.chunks),
            "streamed": self.streamed,
            "busiest_resource": self.busiest_resource if self.resolved else None,
            "resource_s": self.resources if self.resolved else None,
        }
        if self.drafter is not None:  # a speculative run: the target's and the drafter's parts
            d = self.drafter
            out["target_ttft_s"] = self.ends_s[-1]
            out["drafter"] = {"model": self.drafter_model, "done_s": self.drafter_done_s,
                              "chunks": len(d.chunks), "streamed": d.streamed,
                              "own_units": self.drafter_own_units}  # fmt: skip
        return out


def chunks_of(prompt: int, chunk: int) -> list[tuple[int, int]]:
    """``(context, tokens)`` of each prefill step of a ``prompt``-token prompt (at least one
    token) in chunks of ``chunk``."""
    prompt = max(1, prompt)
    return [(start, min(chunk, prompt - start)) for start in range(0, prompt, chunk)]


def chunk_tokens(system) -> int | None:
    """The preset's prefill chunk (tokens), None for a kind whose presets name none."""
    chunk = getattr(system.spec.params, "prefill_chunk_tokens", None)
    return int(chunk) if chunk else None


def expands_mla(system) -> bool:
    """Whether ``system``'s engine runs an MLA model's prompt chunks expanded (its pass model's
    ``PREFILL_EXPANDS_MLA``: GPUs), else absorbed as it decodes (prefill.mla_absorbed)."""
    return bool(getattr(engine_module(system.kind).pass_model, "PREFILL_EXPANDS_MLA", False))


def prefill(model, system, placement, workload, events: bool = False,
            release_s=None) -> Prefill:  # fmt: skip
    """Emulate the prefill of one sequence's ``workload.context``-token prompt on ``placement``
    (see module): one emulated step per chunk (with ``events``, each chunk's events are kept to
    say where the time goes: ``Chunk.resources``, empty without), then, where the engine
    streams chunks, their schedule through its stages. ``release_s``: when each chunk's input
    is ready (s; default: all at 0), e.g. a draft head's chunk waiting for the target's hidden
    states of that chunk; ``ttft_s`` is then the last chunk's end on that clock."""
    chunk = chunk_tokens(system) or max(1, workload.context)
    engine = engine_module(system.kind)
    out, graphs = [], []
    for context, tokens in chunks_of(workload.context, chunk):
        work = replace(workload, batch=1, context=context, step_tokens=tokens, tokens=1,
                       spec_decode=None, prefill=True,
                       expand_mla=expands_mla(system))  # fmt: skip
        graph = run_graph(model, system, work)  # built once: the stream below times it again
        if events:
            trace = emulate(graph, system, placement, work, event_steps=frozenset({0}))
            step, busy = int(trace.step_cycles[0]), union_by(trace, "resource", 0)
        else:  # the step alone, as emulate times it (no events, no lower bound)
            step, busy = one_step_cycles(graph, system, placement), {}
        out.append(Chunk(context, tokens, step / system.spec.clock_hz, busy))
        graphs.append(graph)
    prompt, clock = max(1, workload.context), system.spec.clock_hz
    if not getattr(engine.pass_model, "PREFILL_STREAMS", False):
        ends, t = [], 0.0  # one chunk after another, each when its input is ready
        for i, c in enumerate(out):
            t = (t if release_s is None else max(t, release_s[i])) + c.seconds
            ends.append(t)
        return Prefill(prompt, chunk, tuple(out), t, resolved=events, ends_s=tuple(ends))
    release = None if release_s is None else [cycles(r, clock) for r in release_s]
    ends = _streamed_ends(engine, system, placement, graphs, release)
    return Prefill(prompt, chunk, tuple(out), ends[-1] / clock, streamed=True, resolved=events,
                   ends_s=tuple(e / clock for e in ends))  # fmt: skip


def _streamed_ends(engine, system, placement, graphs, release) -> list[int]:
    """The cycle each chunk leaves the last stage, the chunks (``graphs``: each chunk's
    one-step graph) streaming through the stages, each entering when ``release`` says
    (cycles; None: at 0)."""
    stages, links = [], []
    for graph in graphs:
        timing = MicroBatchPasses(engine, graph, system, placement).pass_timing(
            graph.workload.context
        )
        stages.append(timing.stage_cycles)
        links.append(timing.links)
    return stream_ends(stages, None if links[0] is None else links, release)
