"""Command-line flags that override configuration keys, shared by `batonmq` and `batonctl`."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping

from batonmq.config import ConfigError


def flag_overrides(
    args: argparse.Namespace,
    flag_keys: Mapping[str, str],
    convert: Callable[[str, str], object] | None = None,
) -> dict[str, object]:
    """The dotted-key overrides the given flags make; `convert(flag, text)` may type a value
    (load_config validates it and reports errors in the same words as for the file)."""
    overrides: dict[str, object] = {}
    for flag, key in flag_keys.items():
        value = getattr(args, flag.removeprefix("--").replace("-", "_"))
        if value is not None:
            overrides[key] = convert(flag, value) if convert is not None else value
    return overrides


def flag_error(error: ConfigError, flag_keys: Mapping[str, str]) -> ConfigError:
    """An error about an override, re-worded to name the flag the user typed."""
    flags = {key: flag for flag, key in flag_keys.items()}
    if error.source == "overrides" and error.key in flags:
        return ConfigError(error.problem, source=flags[error.key], key=error.key)
    return error
