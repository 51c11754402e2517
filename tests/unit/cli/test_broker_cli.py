"""The `batonmq` command: flags, precedence, errors, and the hand-over to the server."""

from __future__ import annotations

import importlib.util
import logging
import os
import subprocess
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import batonmq.server
from batonmq import __version__
from batonmq.cli.broker import main
from batonmq.config import Config


@dataclass
class FakeServer:
    """Stands in for batonmq.server.app.run: records each config and the logging it found."""

    exit_code: int = 0
    configs: list[Config] = field(default_factory=list)
    batonmq_log_level: int | None = None

    def run(self, config: Config) -> int:
        self.configs.append(config)
        self.batonmq_log_level = logging.getLogger("batonmq").level
        return self.exit_code


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """No BATONMQ variables from the caller; the default data_dir under tmp_path; and the
    logging that main configures undone afterwards."""
    for name in list(os.environ):
        if name.startswith("BATONMQ"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    root = logging.getLogger()
    batonmq_logger = logging.getLogger("batonmq")
    handlers, level = list(root.handlers), batonmq_logger.level
    yield tmp_path / "xdg" / "batonmq"
    root.handlers[:] = handlers
    batonmq_logger.setLevel(level)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> FakeServer:
    fake = FakeServer()
    if importlib.util.find_spec("batonmq.server.app") is not None:
        from batonmq.server import app

        monkeypatch.setattr(app, "run", fake.run)
    else:
        # batonmq.server.app is being written in parallel; until it exists, a stand-in module
        # (removed again by monkeypatch) lets main run through to the hand-over.
        stand_in = types.ModuleType("batonmq.server.app")
        stand_in.run = fake.run  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "batonmq.server.app", stand_in)
        monkeypatch.setattr(batonmq.server, "app", stand_in, raising=False)
    return fake


def write(directory: Path, text: str, name: str = "batonmq.toml") -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


# --- runs -----------------------------------------------------------------------------------


def test_no_arguments_runs_with_defaults(server: FakeServer, clean_environment: Path) -> None:
    assert main([]) == 0

    [config] = server.configs
    assert config == Config(data_dir=clean_environment)
    assert clean_environment.is_dir()
    assert server.batonmq_log_level == logging.INFO


def test_flags_set_the_configuration(server: FakeServer, tmp_path: Path) -> None:
    data_dir = tmp_path / "deep" / "data"

    code = main(
        [
            "--bind", "127.0.0.1",
            "--port", "5673",
            "--http-port", "15673",
            "--data-dir", str(data_dir),
            "--log-level", "debug",
            "--log-format", "json",
        ]
    )  # fmt: skip

    assert code == 0
    [config] = server.configs
    assert (config.listeners.amqp.bind, config.listeners.amqp.port) == ("127.0.0.1", 5673)
    assert config.listeners.http.port == 15673
    assert config.data_dir == data_dir
    assert data_dir.is_dir()  # parents created before the server runs
    assert (config.log.level, config.log.format) == ("debug", "json")
    assert server.batonmq_log_level == logging.DEBUG


def test_server_exit_code_is_returned(server: FakeServer) -> None:
    server.exit_code = 3

    assert main([]) == 3


def test_relative_data_dir_flag_is_relative_to_the_working_directory(
    server: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    assert main(["--data-dir", "state"]) == 0

    assert server.configs[0].data_dir == tmp_path / "state"
    assert (tmp_path / "state").is_dir()


def test_config_file_flag(server: FakeServer, tmp_path: Path) -> None:
    path = write(tmp_path, "[amqp]\nheartbeat = 15\n[broker]\ndata_dir = 'from-file'\n")

    assert main(["--config", str(path)]) == 0

    [config] = server.configs
    assert config.amqp.heartbeat == 15
    assert config.data_dir == tmp_path / "from-file"


def test_batonmq_config_environment_variable(
    server: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BATONMQ_CONFIG", str(write(tmp_path, "[amqp]\nchannel_max = 8\n")))

    assert main([]) == 0

    assert server.configs[0].amqp.channel_max == 8


def test_flag_beats_environment_beats_file(
    server: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(
        tmp_path, "[listeners.amqp]\nport = 1111\nbind = '127.0.0.2'\n[amqp]\nheartbeat = 5\n"
    )
    monkeypatch.setenv("BATONMQ__LISTENERS__AMQP__PORT", "2222")
    monkeypatch.setenv("BATONMQ__LISTENERS__AMQP__BIND", "127.0.0.3")

    assert main(["--config", str(path), "--port", "3333"]) == 0
    assert main(["--config", str(path)]) == 0

    flagged, unflagged = server.configs
    assert flagged.listeners.amqp.port == 3333
    assert flagged.listeners.amqp.bind == "127.0.0.3"
    assert flagged.amqp.heartbeat == 5
    assert unflagged.listeners.amqp.port == 2222


# --- errors: exit status 2, one line on stderr, no traceback, the server not started ----------


def run_failing(argv: list[str], capsys: pytest.CaptureFixture[str], server: FakeServer) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2
    assert server.configs == []
    assert "Traceback" not in err
    return err


def test_broken_file(
    server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "[amqp\nheartbeat = 1\n")

    err = run_failing(["--config", str(path)], capsys, server)

    assert err.startswith(f"batonmq: {path}: TOML syntax error at line 1, column ")


def test_unknown_key(
    server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "[amqp]\nheartbeet = 1\n")

    err = run_failing(["--config", str(path)], capsys, server)

    assert err == f"batonmq: {path}: amqp.heartbeet: unknown key; did you mean 'amqp.heartbeat'?\n"


def test_missing_config_file(
    server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = run_failing(["--config", str(tmp_path / "absent.toml")], capsys, server)

    assert err == f"batonmq: {tmp_path / 'absent.toml'}: no such file\n"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        pytest.param(
            ["--port", "abc"],
            "batonmq: --port: listeners.amqp.port: expected an integer, got string 'abc'\n",
            id="port-not-a-number",
        ),
        pytest.param(
            ["--port", "70000"],
            "batonmq: --port: listeners.amqp.port: must be between 0 and 65535, got 70000\n",
            id="port-out-of-range",
        ),
        pytest.param(
            ["--bind", "no such host"],
            "batonmq: --bind: listeners.amqp.bind: expected an IP address or a host name, "
            "got 'no such host'\n",
            id="bind",
        ),
        pytest.param(
            ["--log-level", "loud"],
            "batonmq: --log-level: log.level: expected one of 'debug', 'info', 'warning', "
            "'error', got 'loud'\n",
            id="log-level",
        ),
        pytest.param(
            ["--log-format", "xml"],
            "batonmq: --log-format: log.format: expected one of 'text', 'json', got 'xml'\n",
            id="log-format",
        ),
    ],
)
def test_bad_flag_values(
    argv: list[str], expected: str, server: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_failing(argv, capsys, server) == expected


def test_bad_environment_value(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BATONMQ__AMQP__HEARTBEAT", "often")

    err = run_failing([], capsys, server)

    assert err == (
        "batonmq: environment variable BATONMQ__AMQP__HEARTBEAT: amqp.heartbeat: "
        "expected an integer, got string 'often'\n"
    )


def test_data_dir_that_cannot_be_created(
    server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain_file = write(tmp_path, "", name="plain")

    err = run_failing(["--data-dir", str(plain_file / "data")], capsys, server)

    assert err == f"batonmq: cannot create data directory {plain_file / 'data'}: Not a directory\n"


def test_data_dir_that_is_a_file(
    server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain_file = write(tmp_path, "", name="plain")

    err = run_failing(["--data-dir", str(plain_file)], capsys, server)

    assert err == f"batonmq: data directory {plain_file}: exists and is not a directory\n"


def test_unknown_flag_is_a_usage_error(
    server: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    err = run_failing(["--bogus"], capsys, server)

    assert "unrecognized arguments: --bogus" in err


# --- information --------------------------------------------------------------------------


def test_version(server: FakeServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0

    assert capsys.readouterr().out == f"batonmq {__version__}\n"
    assert server.configs == []


def test_help(server: FakeServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0

    out = capsys.readouterr().out
    flags = ("--config", "--bind", "--port", "--http-port", "--data-dir", "--log-level")
    for flag in (*flags, "--log-format"):
        assert flag in out
    assert server.configs == []


def test_python_dash_m_reports_a_config_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATONMQ")}

    result = subprocess.run(
        [sys.executable, "-m", "batonmq", "--port", "abc", "--data-dir", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip

    assert result.returncode == 2
    assert result.stderr == (
        "batonmq: --port: listeners.amqp.port: expected an integer, got string 'abc'\n"
    )
