"""A speculative run's time to first token: the drafter prefills the prompt too, where its
placement puts it.

Before its first round a drafter must hold the prompt in its own KV cache: a separate draft
model runs the prompt's tokens through all its layers; an EAGLE-3 head, an MTP module or a
block drafter runs its layer(s) over the target's hidden states of every prompt position
(cheaper, not free). Serving engines do it in the step that prefills the target: vLLM's GPU
model runner (vllm/v1/worker/gpu_model_runner.py) calls ``propose_draft_token_ids``, which runs
the drafter over the step's tokens, before ``execute_model`` returns the step's sampled token.

The drafter's prefill is one more :func:`pyaccel.prefill.prefill` of the same prompt on the
drafter's own placement and workload (those its rounds are emulated on), in the same chunks:

- on the target's units (GPUs, wafers: spec.own_drafter_units) it runs after the target's
  on the same machines, so the two add (as a round's drafting and verifying do:
  spec.serial_round);
- on units of its own (an ASIC's etched dies, an LPU's chips) it runs beside the target's: a
  separate draft model from the first chunk on (it needs only the prompt's tokens), a draft
  head each chunk once the target has finished that chunk (its hidden states); the first
  token is out when both are done.

Units: seconds.
"""

from __future__ import annotations

from dataclasses import replace

from .prefill import Prefill, prefill

_BOTH = (
    "spec.drafter_prefill: before the first round the drafter prefills the prompt on its own "
    "placement, in the same chunks (a separate draft model over the prompt's tokens, an "
    "EAGLE-3/MTP/block head over the target's hidden states); ttft_s counts it, as vLLM's "
    "runner drafts before it returns the step's token. "
)
SERIAL = _BOTH + "On the target's units it runs after the target's prefill (the two add)"
BESIDE = _BOTH + (
    "On units of its own it runs beside the target's prefill: a draft model from the start, "
    "a draft head's chunk once the target has left that chunk (moving the hidden states "
    "between their units is not costed); ttft_s is the later of the two ends"
)


def with_drafter(target: Prefill, spec, system, events: bool = False) -> Prefill:
    """``target`` (the target's prefill on ``system``) with the drafter of ``spec`` (a
    :class:`~pyaccel.speculate.SpecResult`) prefilling the same prompt on the placement its
    rounds ran on (see module); ``ttft_s`` the time both are done (s)."""
    from .speculate import OWN_UNITS

    d_system, d_plc, d_work, _ = spec.drafter_run
    cfg = spec.drafter.config
    own = system.kind in OWN_UNITS
    # a draft head reads the target's hidden states of each chunk: it waits for the target's
    heads = cfg.draft_head is not None and cfg.draft_head.fused_states > 0
    release = target.ends_s if own and heads else None
    drafter = prefill(cfg, d_system, d_plc, d_work, events, release)  # the prompt: its context
    # on its own units its chunks' ends are on the run's clock; on the target's it follows it
    done = drafter.ttft_s if own else target.ttft_s + drafter.ttft_s
    return replace(target, ttft_s=max(target.ttft_s, done), drafter=drafter,
                   drafter_model=cfg.name, drafter_own_units=own,
                   drafter_done_s=done)  # fmt: skip


def assumption(prefilled: Prefill) -> str:
    """The named assumption a speculative run's ``ttft_s`` rests on."""
    return BESIDE if prefilled.drafter_own_units else SERIAL
