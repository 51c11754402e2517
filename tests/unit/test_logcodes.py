"""The catalogue of log codes: every operational line of the broker's log carries a stable
code, listed in docs/log-codes.md with its meaning and what to do (the management issue's coded
log, after Sun MQ's coded broker messages and Qpid's operational log message ids)."""

from __future__ import annotations

import ast
import importlib
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from batonmq.engine.alerts import AlertKind
from batonmq.logcodes import CATALOGUE, code_of, markdown

ROOT = Path(__file__).parents[2]
SOURCE = ROOT / "src" / "batonmq"
LEVEL_METHODS = {"info", "warning", "error", "critical", "exception"}
#: Calls whose message is built at run time, and what gives it a code.
DYNAMIC = {
    # Alert.text starts with the alert kind's name: one code per kind (checked below).
    ("engine/alerts.py", "alert.text(queue.name)"),
    # The text its callers pass to Session._log_repeatable, whose calls are checked themselves.
    ("engine/session.py", "text"),
    # CoalescingLog writes the texts its callers give it (checked as their calls) and counts.
    ("logrepeat.py", "'%s'"),
    ("logrepeat.py", "'%s (x%d in the last %d s)'"),
}


def test_codes_and_starts_are_unique():
    assert len({entry.code for entry in CATALOGUE}) == len(CATALOGUE)
    assert len({entry.starts for entry in CATALOGUE}) == len(CATALOGUE)


def test_the_docs_table_is_the_catalogue():
    """docs/log-codes.md is `python -m batonmq.logcodes`: regenerate it after a change."""
    assert (ROOT / "docs" / "log-codes.md").read_text(encoding="utf-8") == markdown()


def test_a_line_takes_the_most_specific_code():
    assert code_of("ACL reloaded") == "BMQ-1013"
    assert code_of("ACL DENY-LOG") == "BMQ-1015"
    assert code_of("connection closed (x3 in the last 10 s)") == "BMQ-2002"
    assert code_of("said hi") is None


@pytest.mark.parametrize("kind", list(AlertKind))
def test_every_alert_kind_has_a_code(kind: AlertKind):
    assert code_of(f"{kind.name} On Queue q - 1: x (0, y) breached.") is not None


def _messages() -> Iterator[tuple[str, int, ast.expr]]:
    """(module, line, message argument) of every log call at info and above in the source."""
    for path in sorted(SOURCE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            receiver = ast.unparse(node.func.value)
            if not ("log" in receiver or "failures" in receiver or receiver == "self"):
                continue
            if node.func.attr in LEVEL_METHODS and node.args and receiver != "self":
                yield str(path.relative_to(SOURCE)), node.lineno, node.args[0]
            elif node.func.attr in ("log", "_log_repeatable") and len(node.args) >= 2:
                level = ast.unparse(node.args[0])
                if level != "logging.DEBUG":
                    yield str(path.relative_to(SOURCE)), node.lineno, node.args[1]


def _fixed_start(module: str, message: ast.expr) -> str | None:
    """The text a call's message starts with, whatever its values."""
    if isinstance(message, ast.Constant) and isinstance(message.value, str):
        return message.value.split("%", 1)[0]
    if isinstance(message, ast.JoinedStr) and isinstance(message.values[0], ast.Constant):
        return str(message.values[0].value)
    if isinstance(message, ast.Name):
        name = "batonmq." + module.removesuffix(".py").replace("/", ".")
        return str(getattr(importlib.import_module(name), message.id))
    return None


def test_every_log_call_of_the_broker_has_a_code():
    """A new log line needs its entry in the catalogue (and docs/log-codes.md)."""
    missing, calls = [], 0
    for module, line, message in _messages():
        calls += 1
        if (module, ast.unparse(message)) in DYNAMIC:
            continue
        start = _fixed_start(module, message)
        if start is None or code_of(start) is None:
            missing.append(f"{module}:{line}: {ast.unparse(message)}")
    assert calls > 50
    assert not missing, "log calls without a code:\n" + "\n".join(missing)


def test_the_formatter_writes_the_code_of_the_brokers_own_lines_only(
    caplog: pytest.LogCaptureFixture,
):
    from batonmq.log import JsonFormatter

    formatter = JsonFormatter()
    own = logging.LogRecord("batonmq.server", logging.INFO, "", 0, "listening", None, None)
    other = logging.LogRecord("asyncio", logging.INFO, "", 0, "listening", None, None)
    assert '"logcode": "BMQ-1002"' in formatter.format(own)
    assert "logcode" not in formatter.format(other)
