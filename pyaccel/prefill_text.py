"""Words for a prompt's prefill in reports (:meth:`pyaccel.prefill.Prefill.as_dict`): where
its time goes, what a share of the time to first token means, how a drafter prefilled.
Units: seconds."""

from __future__ import annotations

from .units import fmt_seconds


def prefill_lines(pf: dict) -> list[str]:
    """Where a prefill's time goes (:meth:`pyaccel.prefill.Prefill.as_dict`): the time to
    first token and each resource class's busy seconds (a class's events counted once)."""
    if not pf:
        return []
    ttft = pf["ttft_s"]
    lines = [
        "",
        f"Prefill: time to first token {fmt_seconds(ttft)} for {pf['prompt_tokens']:,} prompt "
        f"tokens in {pf['chunks']} chunk(s) of <= {pf['chunk_tokens']:,}; busiest "
        f"**{pf.get('busiest_resource') or '-'}**",
    ]
    if pf.get("drafter"):  # a speculative run: the drafter prefilled the prompt too
        lines.append(f"The drafter's prefill: {drafter_prefill_text(pf)}.")
    if pf.get("resource_s"):
        lines += ["", "| prefill resource | time | of TTFT |", "|---|---|---|"]
        for res, t in pf["resource_s"].items():
            lines.append(f"| {res} | {fmt_seconds(t)} | {t / ttft:.0%} |")
        lines += ["", prefill_note(pf)]
    return lines


def drafter_prefill_text(pf: dict) -> str:
    """How a speculative run's drafter prefilled the prompt (``pf``: the
    :meth:`pyaccel.prefill.Prefill.as_dict` of a run with a drafter)."""
    d = pf["drafter"]
    where = "beside the target's, on its own units" if d["own_units"] else "after the target's"
    return (f"{d['model']} {where}, done at {fmt_seconds(d['done_s'])} (the target alone "
            f"{fmt_seconds(pf['target_ttft_s'])})")  # fmt: skip


def prefill_note(pf: dict) -> str:
    """What a prefill resource's share of the time to first token means (``pf``: the
    :meth:`pyaccel.prefill.Prefill.as_dict` of a prefill whose events were kept)."""
    if pf.get("streamed") and pf["chunks"] > 1:
        return ("prefill shares: a class's busy seconds summed over the chunks, over the time "
                "to first token; the chunks stream through the stages at once, so a share may "
                "exceed 100 %")  # fmt: skip
    return "prefill shares: a class's busy seconds over the time to first token"
