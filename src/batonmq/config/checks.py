"""What every setting is made of: the error a bad configuration raises, the validators a setting
declares, and the default data directory."""

from __future__ import annotations

import ipaddress
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import field
from pathlib import Path
from typing import TypeVar

_T = TypeVar("_T")


class ConfigError(ValueError):
    """The configuration cannot be used; the message says where, which key, and what is wrong.

    ``source`` is the file (or environment variable, or "overrides") the bad value came from,
    ``key`` the dotted key, ``problem`` what was wrong; ``str(error)`` joins those present.
    """

    def __init__(self, problem: str, *, source: str | None = None, key: str | None = None):
        self.problem = problem
        self.source = source
        self.key = key
        super().__init__(": ".join(part for part in (source, key, problem) if part))


class Invalid(Exception):
    """Raised by a validator; `load_config` turns it into a ConfigError naming source and key."""


#: A validator takes a value of the setting's type and returns it (possibly normalised), or
#: raises Invalid with a message that completes "<key>: ...".
Check = Callable[[object], object]


def between(low: float, high: float | None = None) -> Check:
    def check(value: object) -> object:
        assert isinstance(value, int | float)
        if high is None and value < low:
            raise Invalid(f"must be at least {low}, got {value}")
        if high is not None and not low <= value <= high:
            raise Invalid(f"must be between {low} and {high}, got {value}")
        return value

    return check


def positive_finite(value: object) -> object:
    assert isinstance(value, float)
    if not math.isfinite(value) or value <= 0:
        raise Invalid(f"must be a finite number greater than 0, got {value}")
    return value


def one_of(*choices: str) -> Check:
    """One of `choices`, in any case, given back spelt as the choice is."""
    by_folded_case = {choice.casefold(): choice for choice in choices}

    def check(value: object) -> object:
        assert isinstance(value, str)
        choice = by_folded_case.get(value.strip().casefold())
        if choice is None:
            expected = ", ".join(repr(choice) for choice in choices)
            raise Invalid(f"expected one of {expected}, got {value!r}")
        return choice

    return check


def non_empty(value: object) -> object:
    assert isinstance(value, str | Path)
    if not str(value):
        raise Invalid("must not be empty")
    return value


def names(value: object) -> object:
    """Names, none empty, none twice."""
    assert isinstance(value, tuple)
    if "" in value:
        raise Invalid("must not name an empty string")
    twice = sorted({name for name in value if value.count(name) > 1})
    if twice:
        raise Invalid(f"names {', '.join(map(repr, twice))} more than once")
    return value


# RFC 1123 host names: dot-separated labels of letters, digits and inner hyphens, at most 63
# characters each and 253 in all.
_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def bind_address(value: object) -> object:
    assert isinstance(value, str)
    try:
        ipaddress.ip_address(value)
    except ValueError:
        pass
    else:
        return value
    labels = value.removesuffix(".").split(".")
    if (
        len(value) > 253
        or not all(_HOST_LABEL.fullmatch(label) for label in labels)
        # "1.2.3.999" is a mistyped address, not a host name: top-level domains are not numeric.
        or labels[-1].isdigit()
    ):
        raise Invalid(f"expected an IP address or a host name, got {value!r}")
    return value


def setting(default: _T, *, check: Check | None = None, key: str | None = None) -> _T:
    """A field with a default, its validator and (for `Config`'s own fields) its TOML key."""
    return field(default=default, metadata={"check": check, "key": key})


def default_data_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_DATA_HOME/batonmq``, or ``~/.local/share/batonmq`` (the XDG base-directory spec,
    which also says to ignore a relative ``XDG_DATA_HOME``)."""
    env = os.environ if environ is None else environ
    xdg_data_home = env.get("XDG_DATA_HOME", "")
    if xdg_data_home and Path(xdg_data_home).is_absolute():
        return Path(xdg_data_home) / "batonmq"
    return home(env) / ".local" / "share" / "batonmq"


def home(environ: Mapping[str, str]) -> Path:
    home = environ.get("HOME")
    return Path(home) if home else Path.home()
