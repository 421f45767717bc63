"""Error wording on both surfaces: a placer's message names the settings to change as the Python
API spells them (``units=4``), and the command line prints the same message with its flags
(``--units 4``)."""

from __future__ import annotations

import json
import re

import pytest

import pyaccel as pa
from pyaccel.errors import as_flags, option

from test_cli import error_line, invoke  # the CLI suite's helpers

# (system, model, units, etch, workload fields): one refusal of every kind's placer, each with
# the unit count (or the setting) that would do
REFUSALS = {
    "wafer": ("wse3", "llama-3.1-70b", 1, False, {}),
    "lpu": ("groq-tsp", "llama-3.1-70b", 8, False, {}),
    "gpu": ("h100", "llama-3.1-405b", 1, False, {}),
    "gpu kv": ("h100", "llama-3.1-8b", 1, False, {"batch": 64, "context": 131072}),
    "asic etched": ("taalas-hc1", "llama-3.1-8b", 3, False, {}),
    "asic other model": ("taalas-hc1", "llama-3.1-70b", 1, False, {}),
    "asic other format": ("taalas-hc1", "llama-3.1-8b", 1, False, {"weights": "int4"}),
    "asic etch": ("taalas-hc1", "llama-3.1-70b", 2, True, {}),
    "asic kv": ("taalas-hc1", "llama-3.1-8b", 1, False, {"batch": 64, "context": 100_000}),
}


def _python_message(system, model, units, etch, fields) -> str:
    work = pa.Workload(tokens=128, **fields)
    with pytest.raises(pa.PyaccelError) as exc:
        pa.place(pa.load_model(model), pa.load_system(system, units=units, etch=etch), work)
    return str(exc.value)


def _cli_line(system, model, units, etch, fields) -> str:
    flags = [x for k, v in fields.items() for x in (f"--{k}", v)]
    etch_flag = ["--etch"] if etch else []
    return error_line(invoke("place", "--system", system, "--model", model, "--units", units,
                             *etch_flag, *flags))  # fmt: skip


@pytest.mark.parametrize("label", REFUSALS)
def test_placer_refusals_name_python_settings_and_the_cli_its_flags(label):
    case = REFUSALS[label]
    text = _python_message(*case)
    assert not re.search(r"--[a-z]", text), text  # no flag the Python caller never typed
    assert re.search(r"\b(units|etch|batch|context|kv|weights)=", text), text
    assert _cli_line(*case) == f"error: {as_flags(text)}"  # the same message, as flags


def test_a_unit_count_that_fits_reads_as_each_surface_writes_it():
    text = _python_message(*REFUSALS["wafer"])
    assert text.endswith("; units=4 would fit")
    assert _cli_line(*REFUSALS["wafer"]).endswith("; --units 4 would fit")
    text = _python_message(*REFUSALS["asic other model"])
    assert "pass etch=True to design dies" in text
    assert "pass --etch to design dies" in _cli_line(*REFUSALS["asic other model"])


@pytest.mark.parametrize(
    "name,value,python,cli",
    [
        ("units", 4, "units=4", "--units 4"),
        ("units", "auto", "units='auto'", "--units auto"),
        ("expert_weights", "int4-g32", "expert_weights='int4-g32'", "--expert-weights int4-g32"),
        ("etch", True, "etch=True", "--etch"),
        ("overrides", "expert_layout=auto", "overrides=['expert_layout=auto']",
         "--set expert_layout=auto"),
    ],
)  # fmt: skip
def test_option_and_as_flags_are_two_spellings_of_one_setting(name, value, python, cli):
    assert option(name, value) == python
    assert as_flags(f"so {python} would fit") == f"so {cli} would fit"


def test_as_flags_leaves_other_text_alone():
    text = "clock_hz=1e9 with kv_sram_bytes=4 and 'units=4' of lpu.units=2; batch 4 fits"
    assert as_flags(text) == text
    with pytest.raises(ValueError, match="option 'speed'"):
        option("speed", 2)


# (system, units, etch, model): placements whose reason names the unit count (and the etch)
REASONS = {
    "gpu": ("h100", 4, False, "llama-3.1-8b", "units=4: TP 4 x PP 1", "--units 4: TP 4 x PP 1"),
    "asic": ("taalas-hc1", 2, True, "llama-3.1-8b", "units=2 etch=True", "--units 2 --etch"),
}


@pytest.mark.parametrize("label", REASONS)
def test_placement_reasons_name_python_settings_and_the_cli_its_flags(label):
    system, units, etch, model, python, cli = REASONS[label]
    work = pa.Workload(tokens=8)
    plc = pa.place(pa.load_model(model), pa.load_system(system, units=units, etch=etch), work)
    assert plc.reason.startswith(python) and "--" not in plc.reason
    etch_flag = ["--etch"] if etch else []
    args = ["--system", system, "--model", model, "--units", units, *etch_flag, "--tokens", 8]
    placed = json.loads(invoke("place", *args, "--json").output)
    ran = json.loads(invoke("run", *args, "--json").output)
    assert placed["reason"].startswith(cli) and ran["placement_reason"].startswith(cli)
    assert cli in invoke("place", *args).output  # the text table's heading


def test_etch_on_another_kind_names_the_setting_as_each_surface_writes_it():
    with pytest.raises(pa.ConfigError, match=r"^etch=True applies to asic systems"):
        pa.load_system("h100", etch=True)
    line = error_line(invoke("run", "--system", "h100", "--etch", "--model", "llama-3.1-8b"))
    assert line.startswith("error: --etch applies to asic systems")


def test_a_die_without_kv_sram_names_the_override_as_each_surface_writes_it():
    system = pa.load_system("taalas-hc1", overrides=["transistors=1e9"])
    with pytest.raises(pa.ConfigError, match=r"overrides=\['kv_sram_bytes=BYTES'\]\)$"):
        pa.place(pa.load_model("llama-3.1-8b"), system, pa.Workload(tokens=1))
    line = error_line(invoke("run", "--system", "taalas-hc1", "--model", "llama-3.1-8b",
                             "--set", "transistors=1e9", "--tokens", 1))  # fmt: skip
    assert line.endswith("set the KV SRAM: --set kv_sram_bytes=BYTES)")


@pytest.mark.parametrize("fields,python,cli", [
    ({"spec_decode": "medusa"}, "spec_decode='medusa': kind", "--spec-decode medusa: kind"),
    ({"router": "hot"}, "router='hot': expected", "--router hot: expected"),
    ({"expert_weights": "int4"}, "expert_weights='int4': llama-3.1-8b is a dense model",
     "--expert-weights int4: llama-3.1-8b is a dense model"),
])  # fmt: skip
def test_workload_refusals_name_python_settings_and_the_cli_its_flags(fields, python, cli):
    with pytest.raises(pa.ConfigError) as exc:
        pa.build_graph(pa.load_model("llama-3.1-8b"), pa.Workload(tokens=1, **fields))
    assert str(exc.value).startswith(python) and "--" not in str(exc.value)
    flags = [x for k, v in fields.items() for x in (f"--{k.replace('_', '-')}", v)]
    line = error_line(invoke("run", "--system", "h100", "--model", "llama-3.1-8b", *flags))
    assert line.startswith(f"error: {cli}")
