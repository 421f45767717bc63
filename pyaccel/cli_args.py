"""Parsing of the command line's option strings into the typed values the Python API takes
(``--units``, ``--batches``, ``--systems``). Bad values raise :class:`ConfigError` naming the
option, which the CLI prints as one ``error:`` line."""

from __future__ import annotations

from .errors import ConfigError


def parse_units(text: str | int) -> int | str:
    """``--units``: a positive integer or ``auto`` (any case)."""
    from .hw.io import unit_count

    return unit_count(text, "--units")


def parse_batches(text: str | None, default: int) -> list[int]:
    """``--batches 1,2,4``: positive integers, each once (absent: ``[default]``; like
    ``--systems ""``, an empty list is refused rather than silently meaning the default)."""
    if text is None:
        return [default]
    items = [x.strip() for x in text.split(",")]
    if not any(items):
        raise ConfigError(f"--batches {text!r}: no batch size given; give comma-separated "
                          "sizes (e.g. 1,8,64), or leave --batches out for --batch")  # fmt: skip
    try:
        values = [int(x) for x in items if x]
    except ValueError:
        raise ConfigError(f"--batches '{text}': expected comma-separated integers") from None
    if min(values) < 1:
        raise ConfigError(f"--batches '{text}': batch sizes must be positive")
    from .workload import MAX_BATCH

    if max(values) > MAX_BATCH:
        raise ConfigError(f"--batches '{text}': batch size {max(values):,} is above the limit "
                          f"of {MAX_BATCH:,} sequences per step")  # fmt: skip
    twice = next((v for i, v in enumerate(values) if v in values[:i]), None)
    if twice is not None:  # as --systems: the same runs twice, as two rows of one table
        raise ConfigError(f"--batches '{text}': batch size {twice} is listed twice")
    return values


def parse_systems(text: str | None) -> list[str] | None:
    """``--systems a,b``: the names in order (absent: ``None``, every preset). Each name must
    be non-empty and appear once (``--systems ""`` must not silently mean "all")."""
    if text is None:
        return None
    names = [s.strip() for s in text.split(",")]
    for i, name in enumerate(names):
        if not name:
            raise ConfigError(
                f"--systems {text!r}: system {i + 1} of {len(names)} is empty; give "
                "comma-separated preset names or TOML files (e.g. h100,wse3), or leave "
                "--systems out for every preset"
            )
        if name in names[:i]:
            raise ConfigError(f"--systems {text!r}: '{name}' is listed twice")
    return names


# the options place --check takes; it checks the file as recorded, so others would be ignored
CHECK_TAKES = ("system", "model", "check", "as_json")


def refuse_beside_check(ctx) -> None:
    """``place --check`` checks a file against the units, workload and ``--set`` overrides it
    records (``--system`` / ``--model`` may name others): any other option given on the command
    line (``ctx``: the click context) is refused, naming it, rather than silently ignored."""

    # by the source's name: typer may carry its own copy of click's ParameterSource enum
    def typed(name: str) -> bool:
        return getattr(ctx.get_parameter_source(name), "name", "") == "COMMANDLINE"

    given = [p.opts[0] for p in ctx.command.params if p.name not in CHECK_TAKES and typed(p.name)]
    if given:
        raise ConfigError(
            f"place --check checks the file's recorded units, workload and --set overrides "
            f"(--system and --model may name others); {', '.join(given)} not taken with "
            "--check: place again with them for a new placement"
        )
