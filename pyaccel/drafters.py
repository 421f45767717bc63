"""The drafter of each ``--spec-decode`` kind as a model the spine can place and emulate
(SPEC §7): a separate model (``draft``), the target's own MTP module (``mtp``), an EAGLE-3
feature-draft head (``eagle3``) or a block drafter (``block``).

EAGLE-3 heads and block drafters are small Llama-style decoders that read the target's hidden
states; their shapes come from the published checkpoints' configs in
``pyaccel/data/drafters.toml`` (per target where one is published, else the kind's rule over the
target's own widths, said in the run's assumptions). An MTP drafter is the module the target's
config declares (``num_nextn_predict_layers``): one more decoder layer of the target's kind.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, replace
from importlib import resources

from .errors import ConfigError, option
from .model.config import DraftHead, ModelConfig, config_from_dict, load_model

DRAFTERS_FILE = "drafters.toml"
# how each kind's drafter makes its k tokens: one step per token, or one pass over the block
CHAIN, BLOCK = "chain", "block"


@dataclass(frozen=True)
class Drafter:
    """A drafter: its model ``config``, whether it drafts a round's ``k`` tokens one step at a
    time (``chain``) or in one pass over ``k + 1`` positions (``block``), and where its shapes
    come from (``source``; ``assumed`` when the target has no published drafter of the kind)."""

    config: ModelConfig
    mode: str
    source: str
    assumed: bool = False


def drafter_for(kind: str, draft: str | None, target: ModelConfig) -> Drafter:
    """The :class:`Drafter` of ``kind`` for ``target`` (``draft``: the model of kind ``draft``)."""
    if kind == "draft":
        try:
            cfg = load_model(draft)
        except ConfigError as exc:  # say it is the drafter that is unknown, not the target
            raise ConfigError(f"{option('spec_decode', f'draft:{draft}')}: {exc}") from None
        if cfg.vocab != target.vocab:
            raise ConfigError(
                f"{option('spec_decode', f'draft:{draft}')}: its vocabulary ({cfg.vocab:,}) is "
                f"not the target's ({target.vocab:,}); a drafter must propose the target's tokens"
            )
        return Drafter(cfg, CHAIN, f"model {cfg.name} ({cfg.source})")
    if kind == "mtp":
        return _mtp(target)
    return _feature_drafter(kind, target)


def _mtp(target: ModelConfig) -> Drafter:
    """The target's MTP module: ``eh_proj`` over [embedding; hidden state] (2 x hidden -> hidden),
    one decoder layer like the target's last, and the target's embedding and LM head (DeepSeek-V3
    report §2.2). k > 1 drafts reuse the module step after step, as serving engines do."""
    if not target.mtp_layers:
        raise ConfigError(
            f"{option('spec_decode', 'mtp')}: {target.name}'s config declares no MTP layers "
            "(num_nextn_predict_layers is 0 or absent); use eagle3, block or draft:MODEL"
        )
    last = target.n_layers - 1
    dense = (0,) if target.is_dense_layer(last) else ()
    cfg = replace(
        target, name=f"{target.name}/mtp", n_layers=1, dense_layers=dense, mtp_layers=0,
        layer_types=target.layer_types[-1:] if target.layer_types else (),
        draft_head=DraftHead(fused_states=2, shares_embedding=True, shares_head=True),
    )  # fmt: skip
    spec = _table()["mtp"]
    return Drafter(cfg, CHAIN, f"{target.name} config: {target.mtp_layers} MTP layer(s); "
                   f"{spec['source']}")  # fmt: skip


def _feature_drafter(kind: str, target: ModelConfig) -> Drafter:
    """An EAGLE-3 head or block drafter: a Llama-style decoder at the published checkpoint's
    shapes for ``target``, else the kind's rule over the target's widths."""
    spec = _table()[kind]
    published = spec.get("targets", {}).get(target.name)
    shape = dict(published or {})
    raw = {
        "model_type": spec.get("model_type", "llama"),
        "hidden_size": target.hidden,
        "num_attention_heads": target.n_heads,
        "num_key_value_heads": target.n_kv_heads if target.attention == "gqa" else target.n_heads,
        "head_dim": target.head_dim if target.attention == "gqa" else target.v_head_dim,
        "intermediate_size": target.ffn or target.expert_ffn,
        "vocab_size": target.vocab,
        "rms_norm_eps": target.norm_eps,
        "rope_theta": target.rope_theta,
        "max_position_embeddings": target.max_position,
        "num_hidden_layers": spec["layers"],
    }
    raw.update({k: v for k, v in shape.items() if k not in ("source",)})
    vocab = raw.pop("draft_vocab_size", spec.get("draft_vocab_size") or raw["vocab_size"])
    raw["vocab_size"] = vocab
    where = f"{DRAFTERS_FILE} [{kind}] for {target.name}"
    cfg = config_from_dict(raw, f"{target.name}/{kind}", where)
    head = DraftHead(
        fused_states=int(spec["fused_states"]),
        attn_input=int(spec.get("attn_input", 1)),
        shares_embedding=bool(spec["shares_embedding"]),
        shares_head=bool(spec["shares_head"]),
    )
    source = (published or {}).get("source") or spec["source"]
    mode = BLOCK if kind == "block" else CHAIN
    return Drafter(replace(cfg, draft_head=head), mode, source, assumed=published is None)


def _table() -> dict:
    text = resources.files("pyaccel.data").joinpath(DRAFTERS_FILE).read_text("utf-8")
    table = tomllib.loads(text)
    for kind, spec in table.items():
        for name, shape in spec.get("targets", {}).items():
            if "source" not in shape:  # [k.targets.llama-3.1-8b] nests at its dots: quote it
                raise ConfigError(
                    f"{DRAFTERS_FILE} [{kind}.targets.{name}] has no source (a model name "
                    'with dots must be quoted: [KIND.targets."NAME"])'
                )
    return table
