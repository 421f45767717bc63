"""Make the README's gallery from one command: ``python docs/gallery/make_gallery.py``.

Each picture is made by the ``pyaccel`` commands printed beside it (and listed in the README),
run here as a user would run them, into this folder. The sweeps use no cache, so the pictures
always show the installed code.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
STEPS = [
    "pyaccel sweep frontier.toml --out frontier.parquet --no-cache",
    "pyaccel plot frontier frontier.parquet --out frontier.png",
    "pyaccel plot cost frontier.parquet --out cost.png",
    "pyaccel sweep capacity.toml --out capacity.parquet --no-cache",
    "pyaccel plot capacity capacity.parquet --out capacity.png",
    "pyaccel report --system h100 --model llama-3.1-8b --json > report-h100.json",
    "pyaccel plot roofline report-h100.json --out roofline-h100.png",
    "pyaccel report --system wse3 --model llama-3.1-8b --json > report-wse3.json",
    "pyaccel plot roofline report-wse3.json --out roofline-wse3.png",
    "pyaccel validate --json > validate.json",
    "pyaccel plot validation validate.json --out validation.png",
]
MADE = ("*.parquet", "*.json")  # the tables in between, not kept


def main() -> int:
    exe = shutil.which("pyaccel") or f"{sys.executable} -m pyaccel"
    for step in STEPS:
        print(f"$ {step}", flush=True)
        cmd, _, target = step.partition(" > ")
        args = cmd.replace("pyaccel", exe, 1)
        if target:
            with open(HERE / target, "w") as sink:
                done = subprocess.run(args, shell=True, cwd=HERE, stdout=sink)
        else:
            done = subprocess.run(args, shell=True, cwd=HERE)
        if done.returncode:
            print(f"failed: {step}", file=sys.stderr)
            return done.returncode
    for pattern in MADE:
        for path in HERE.glob(pattern):
            path.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
