"""Hardware presets: every number sourced or a named assumption; overrides; errors."""

import pytest

import pyaccel as pa
from pyaccel.hw.io import apply_overrides, preset_names
from pyaccel.hw.spec import PARAMS_BY_KIND


def test_every_preset_has_every_parameter_with_provenance():
    names = preset_names()
    assert set(names) == {"wse2", "wse3", "wse3t", "groq-tsp", "taalas-hc1", "taalas-hc2", "h100",
                          "h200", "b200", "ascend-950"}  # fmt: skip
    for name in names:
        spec = pa.load_spec(name)
        fields = set(PARAMS_BY_KIND[spec.kind].__dataclass_fields__)
        assert set(spec.sources) | set(spec.assumptions) == fields
        assert not set(spec.sources) & set(spec.assumptions)
        assert spec.power_w > 0
        for text in spec.assumptions.values():
            assert ":" in text, f"{name}: assumption without a name: {text}"


def test_set_overrides_and_records_them():
    spec = apply_overrides(pa.load_spec("h100"), ["hbm_achievable_bytes_per_s=3.35e12"])
    assert spec.params.hbm_achievable_bytes_per_s == 3.35e12
    assert any("hbm_achievable_bytes_per_s=3.35e12" in a for a in spec.assumption_list())


def test_integer_fields_stay_integers():
    spec = apply_overrides(pa.load_spec("h100"), ["gpus_per_node=4"])
    assert spec.params.gpus_per_node == 4 and isinstance(spec.params.gpus_per_node, int)
    with pytest.raises(pa.ConfigError, match="whole number"):
        apply_overrides(pa.load_spec("h100"), ["gpus_per_node=2.5"])


def test_toml_file_path_loads(tmp_path):
    from importlib import resources

    text = (resources.files("pyaccel.hw") / "presets" / "b200.toml").read_text()
    path = tmp_path / "mine.toml"
    path.write_text(text.replace('name = "b200"', 'name = "my-b200"'))
    assert pa.load_system(str(path)).name == "my-b200"


def test_unknown_system_lists_presets():
    with pytest.raises(pa.PresetError, match="h100"):
        pa.load_spec("tpu-v9")
