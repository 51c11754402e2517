"""``batonmq``: run a broker.

Flags override the configuration file and the environment (see `batonmq.config`). Exit codes:
0 after a clean shutdown, 2 for a configuration or usage error, else what the server returns.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from batonmq import __version__
from batonmq.cli.flags import flag_error, flag_overrides
from batonmq.config import CONFIG_FILE_VARIABLE, ENV_PREFIX, ConfigError, load_config
from batonmq.log import configure_logging

#: Exit status for a usage or configuration error (argparse's, and the BSD sysexits EX_USAGE
#: convention most command-line tools follow).
EXIT_USAGE = 2

#: Each configuration flag and the dotted key it overrides.
FLAG_KEYS = {
    "--bind": "listeners.amqp.bind",
    "--port": "listeners.amqp.port",
    "--http-port": "listeners.http.port",
    "--data-dir": "broker.data_dir",
    "--log-level": "log.level",
    "--log-format": "log.format",
}


_PORT_FLAGS = frozenset({"--port", "--http-port"})


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="batonmq",
        description="Run a BatonMQ broker (AMQP 0-9-1).",
        epilog=(
            f"The configuration file may also be named by {CONFIG_FILE_VARIABLE}; any key can be "
            f"set in the environment as {ENV_PREFIX}SECTION__KEY (for example "
            f"{ENV_PREFIX}LISTENERS__AMQP__PORT=5673). Flags win over the environment, which wins "
            "over the file."
        ),
    )
    parser.add_argument("--config", metavar="FILE", type=Path, help="TOML configuration file")
    # Values are passed to load_config as given, so that it validates them and reports errors in
    # the same words as for the file and the environment.
    parser.add_argument("--bind", metavar="ADDR", help="address to listen on for AMQP")
    parser.add_argument("--port", metavar="N", help="AMQP port (0 picks a free port)")
    parser.add_argument(
        "--http-port", metavar="N", help="management HTTP API port (0 picks a free port)"
    )
    parser.add_argument("--data-dir", metavar="DIR", help="where the broker keeps its data")
    parser.add_argument("--log-level", metavar="LEVEL", help="debug, info, warning or error")
    parser.add_argument("--log-format", metavar="text|json", help="log line format")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


def _integer_or_text(text: str) -> int | str:
    """`text` as an integer when it is one; load_config reports anything else by key."""
    try:
        return int(text, 10)
    except ValueError:
        return text


def _overrides(args: argparse.Namespace) -> dict[str, object]:
    return flag_overrides(
        args, FLAG_KEYS, lambda flag, text: _integer_or_text(text) if flag in _PORT_FLAGS else text
    )


def _error(message: str) -> int:
    print(f"batonmq: {message}", file=sys.stderr)
    return EXIT_USAGE


def _prepare_data_dir(data_dir: Path) -> str | None:
    """Create the data directory (and its parents); the reason it cannot be used, or None."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        return f"data directory {data_dir}: exists and is not a directory"
    except OSError as error:
        return f"cannot create data directory {data_dir}: {error.strerror or error}"
    if not os.access(data_dir, os.W_OK | os.X_OK):
        return f"data directory {data_dir}: not writable"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the broker until it is stopped; returns the exit status."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit_:  # --help, --version, or a usage error argparse has reported
        if exit_.code is None:
            return 0
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE

    try:
        config = load_config(args.config, overrides=_overrides(args))
    except ConfigError as error:
        return _error(str(flag_error(error, FLAG_KEYS)))

    problem = _prepare_data_dir(config.data_dir)
    if problem is not None:
        return _error(problem)

    configure_logging(config.log.level, config.log.format)

    # Imported here so that a configuration error is reported without loading the server (and
    # its event loop) at all.
    from batonmq.server.app import run

    return run(config)
