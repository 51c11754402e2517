"""``batonctl``: administer a BatonMQ broker's data.

    batonctl [--config FILE] [--data-dir DIR] [--store sqlite|postgres] [--dsn DSN] GROUP COMMAND

The options before the group select the broker whose data is meant, the same way as for
``batonmq`` (the same file, the same BATONMQ__SECTION__KEY variables, flags winning over both).
Each group of commands lives in a module of its own, which `GROUPS` lists: ``db``
(`batonmq.cli.db`, the counterpart of Open MQ's imqdbmgr), ``user`` (`batonmq.cli.users`),
``vhost`` (`batonmq.cli.vhosts`) and ``acl`` (`batonmq.cli.acl`). A group module has one
function, ``register(groups)``, which adds the group's parser to `groups` and gives each of its
commands a ``handler`` default: a `Handler`, called with the parsed arguments and the loaded
configuration, that returns the exit status.

Exit codes, as for ``batonmq``: 0 done, 2 a usage or configuration error, 1 the command failed
(one line on stderr, "batonctl: <what failed>: <reason>", never a traceback).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final, cast

from batonmq import __version__
from batonmq.cli import acl, db, users, vhosts
from batonmq.cli.broker import EXIT_USAGE
from batonmq.cli.flags import flag_error, flag_overrides
from batonmq.config import CONFIG_FILE_VARIABLE, ENV_PREFIX, Config, ConfigError, load_config

PROG: Final = "batonctl"
#: Exit status of a command that was understood but failed (the store locked, damaged,
#: unreachable...).
EXIT_FAILURE: Final = 1
#: Exit status after Ctrl-C (128 + SIGINT, as a shell reports it).
EXIT_INTERRUPTED: Final = 130

#: Runs one command: (parsed arguments, configuration) -> exit status.
Handler = Callable[[argparse.Namespace, Config], int]

#: Each group module's `register`, in the order `batonctl --help` lists them.
GROUPS: Final[tuple[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None], ...]] = (
    db.register,
    users.register,
    vhosts.register,
    acl.register,
)

#: Each configuration flag and the dotted key it overrides.
FLAG_KEYS: Final = {
    "--data-dir": "broker.data_dir",
    "--store": "persist.store",
    "--dsn": "persist.postgres.dsn",
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Administer a BatonMQ broker's data.",
        epilog=(
            "The options select the broker's configuration as for batonmq: the file may also be "
            f"named by {CONFIG_FILE_VARIABLE}, and any key set as {ENV_PREFIX}SECTION__KEY (for "
            f"example {ENV_PREFIX}PERSIST__POSTGRES__DSN, which keeps a password off the command "
            "line). Flags win over the environment, which wins over the file. Exit status: 0 "
            "done, 1 the command failed, 2 a usage or configuration error."
        ),
    )
    parser.add_argument("--config", metavar="FILE", type=Path, help="TOML configuration file")
    # Passed to load_config as given, so that it validates them in the words it uses for the
    # file and the environment.
    parser.add_argument("--data-dir", metavar="DIR", help="the broker's data directory")
    parser.add_argument(
        "--store", metavar="sqlite|postgres", help="the store to use (persist.store)"
    )
    parser.add_argument(
        "--dsn", metavar="DSN", help="PostgreSQL connection string (persist.postgres.dsn)"
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    groups = parser.add_subparsers(
        title="command groups", dest="group", metavar="GROUP", required=True
    )
    for register in GROUPS:
        register(groups)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, --version, or a usage error argparse has reported
        if exit_.code is None:
            return 0
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE

    try:
        config = load_config(args.config, overrides=flag_overrides(args, FLAG_KEYS))
    except ConfigError as error:
        print(f"{PROG}: {flag_error(error, FLAG_KEYS)}", file=sys.stderr)
        return EXIT_USAGE

    handler = cast(Handler, args.handler)
    try:
        return handler(args, config)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    raise SystemExit(main())
