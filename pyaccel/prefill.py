"""Prefill and time to first token: one prompt through the decode placement, chunk by chunk.

A prompt of ``context`` tokens (at least one) is processed as the machine's runtime feeds it:
``prefill_chunk_tokens`` of the sequence a step (the preset's value, sourced or a named
assumption), each chunk a step of ``chunk`` token rows attending causally to the chunks before
it and to each other (``Workload.step_tokens``), so every engine costs it with its own
mechanism: compute-bound GEMMs on GPUs, the rows through the pipeline on wafers and LPUs, the
rows one after another through the ASIC's blocks. The first token comes from the last chunk's
LM head; ``ttft_s`` is the sum of the chunks' times for one sequence arriving at an idle
machine (no queueing behind other requests, no decode steps interleaved).

Units: seconds; tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .emulation import emulate
from .report import union_by

ASSUMPTIONS = (
    "prefill.idle_machine: ttft_s is one sequence's prompt on an idle machine, in chunks of "
    "prefill_chunk_tokens processed one after another on the decode placement (no queueing, "
    "no decode steps of other sequences interleaved); the first token is the last chunk's",
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
    """A prompt's prefill: its chunks, ``ttft_s`` (s, their sum) and the seconds each resource
    class is busy over them (overlapping events of one class counted once a chunk)."""

    prompt_tokens: int
    chunk_tokens: int
    chunks: tuple[Chunk, ...]

    @property
    def ttft_s(self) -> float:
        """Time to first token (s): the chunks one after another."""
        return sum(c.seconds for c in self.chunks)

    @property
    def resources(self) -> dict:
        """Seconds each resource class is busy over the whole prefill, largest first."""
        out: dict = {}
        for c in self.chunks:
            for name, s in c.resources.items():
                out[name] = out.get(name, 0.0) + s
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    @property
    def busiest_resource(self) -> str:
        """The resource class busy longest over the prefill."""
        return next(iter(self.resources), "")

    def as_dict(self) -> dict:
        """Plain data for JSON: ttft, chunking and the resource seconds."""
        return {
            "ttft_s": self.ttft_s,
            "prompt_tokens": self.prompt_tokens,
            "chunk_tokens": self.chunk_tokens,
            "chunks": len(self.chunks),
            "busiest_resource": self.busiest_resource,
            "resource_s": self.resources,
        }


def chunks_of(prompt: int, chunk: int) -> list[tuple[int, int]]:
    """``(context, tokens)`` of each prefill step of a ``prompt``-token prompt (at least one
    token) in chunks of ``chunk``."""
    prompt = max(1, prompt)
    return [(start, min(chunk, prompt - start)) for start in range(0, prompt, chunk)]


def chunk_tokens(system) -> int | None:
    """The preset's prefill chunk (tokens), None for a kind whose presets name none."""
    chunk = getattr(system.spec.params, "prefill_chunk_tokens", None)
    return int(chunk) if chunk else None


def prefill(model, system, placement, workload, events: bool = False) -> Prefill:
    """Emulate the prefill of one sequence's ``workload.context``-token prompt on ``placement``
    (see module): one emulated step per chunk; with ``events``, each chunk's events are kept to
    say where the time goes (``Chunk.resources``; empty without)."""
    chunk = chunk_tokens(system) or max(1, workload.context)
    out = []
    for context, tokens in chunks_of(workload.context, chunk):
        work = replace(workload, batch=1, context=context, step_tokens=tokens, tokens=1,
                       spec_decode=None)  # fmt: skip
        kept = frozenset({0}) if events else frozenset()
        trace = emulate(model, system, placement, work, event_steps=kept)
        step = int(trace.step_cycles[0])
        busy = union_by(trace, "resource", 0) if events else {}
        out.append(Chunk(context, tokens, step / trace.clock_hz, busy))
    return Prefill(max(1, workload.context), chunk, tuple(out))
