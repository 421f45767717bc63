"""Named price assumptions (``pyaccel/data/prices.toml``): what a run costs per million tokens,
for the cost plot. A price never enters a timing; it turns an emulated speed into dollars."""

from __future__ import annotations

import math
import tomllib
from importlib import resources


def load_prices() -> dict:
    """System name -> its price entry (``usd_per_unit_hour`` or ``usd_per_mtok`` by model, with
    ``source`` and ``assumption``)."""
    text = (resources.files("pyaccel.data") / "prices.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def dollars_per_mtok(prices: dict, row) -> float | None:
    """Dollars per million generated tokens of a run (a sweep table's row: ``system``,
    ``model``, the units it used, ``tokens_per_s``), or None when its system (or model) has no
    price: an hourly unit price times the units over the tokens made in an hour, or the model's
    per-token list price."""
    entry = prices.get(str(row["system"]))
    if entry is None:
        return None
    if "usd_per_mtok" in entry:
        return entry["usd_per_mtok"].get(str(row["model"]))
    units = row["run.units"] if "run.units" in row else row["units"]
    tokens_per_hour = float(row["tokens_per_s"]) * 3600
    if not tokens_per_hour > 0 or units is None or math.isnan(float(units)):
        return None
    return entry["usd_per_unit_hour"] * float(units) / tokens_per_hour * 1e6
