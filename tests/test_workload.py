"""Workload: format names resolved once into Format objects, kept in step with the names."""

from dataclasses import replace

import pytest

import pyaccel as pa
from pyaccel.errors import ConfigError
from pyaccel.formats import FORMATS


def test_formats_are_resolved_from_names_and_aliases():
    work = pa.Workload(weights="INT4-G128", expert_weights="fp8-e4m3", kv=" int8 ")
    assert (work.weights, work.expert_weights, work.kv) == ("int4", "fp8", "int8")
    assert work.weights_format is FORMATS["int4"]
    assert work.expert_weights_format is FORMATS["fp8"]
    assert work.kv_format is FORMATS["int8"]


def test_unset_formats_resolve_to_none_until_a_native_format_fills_them():
    work = pa.Workload()
    assert work.weights_format is None and work.expert_weights_format is None
    full = work.resolved("hc1")
    assert full.weights_format is FORMATS["hc1"] and full.expert_weights_format is FORMATS["hc1"]


def test_replace_resolves_again_and_formats_do_not_change_equality():
    work = pa.Workload(weights="bf16", kv="bf16")
    changed = replace(work, weights="nvfp4", kv="fp8")
    assert changed.weights_format is FORMATS["nvfp4"] and changed.kv_format is FORMATS["fp8"]
    assert replace(changed, weights="bf16", kv="bf16") == work
    assert hash(replace(changed, weights="bf16", kv="bf16")) == hash(work)
    assert "weights_format" not in repr(work)  # the names are the workload's face


def test_a_per_role_weight_format_is_refused_as_a_kv_cache_format():
    with pytest.raises(ConfigError, match="--kv format 'hc1' assigns bits by weight tensor role"):
        pa.Workload(kv="hc1")
    assert pa.Workload(weights="hc1", kv="int4").kv == "int4"  # hc1 stays a weight format
