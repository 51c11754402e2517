"""The README's configuration file "with every key at its default" is that: each setting the
broker knows is in it, at the default its field declares (defaults are written once, on the
configuration's fields; this keeps the README from drifting away from them)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from batonmq.config import SETTINGS, Config

README = Path(__file__).parents[2] / "README.md"
#: Settings whose default TOML cannot write (no value) or that depend on the machine.
UNWRITABLE = {"broker.data_dir"}


def every_key_block() -> dict[str, object]:
    text = README.read_text(encoding="utf-8")
    _, _, after = text.partition("A configuration file with every key at its default:")
    block = after.split("```toml\n", 1)[1].split("```", 1)[0]
    flat: dict[str, object] = {}

    def walk(table: dict[str, object], prefix: str) -> None:
        for name, value in table.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{name}.")
            else:  # an array is a tuple setting's value, as the broker reads it
                flat[f"{prefix}{name}"] = tuple(value) if isinstance(value, list) else value

    walk(tomllib.loads(block), "")
    return flat


def default_of(key: str) -> object:
    value: object = Config()
    for name in SETTINGS[key].attribute_path:
        value = getattr(value, name)
    return value


def test_the_readme_names_every_setting_at_its_default() -> None:
    written = every_key_block()
    optional = {key for key in SETTINGS if default_of(key) is None}

    assert sorted(set(SETTINGS) - set(written) - optional - UNWRITABLE) == []
    assert sorted(set(written) - set(SETTINGS)) == []
    # An optional path written as "" is unset, as the broker reads it.
    wrong = {
        key: (value, default_of(key))
        for key, value in written.items()
        if value != default_of(key) and not (key in optional and value == "")
    }
    assert wrong == {}
