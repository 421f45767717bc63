"""Error wording on both surfaces: a placer's message names the settings to change as the Python
API spells them (``units=4``), and the command line prints the same message with its flags
(``--units 4``)."""

from __future__ import annotations

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
