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

Exit codes, as for ``batonmq``: 0 done, 2 a usage or configuration error, 1 the command failed.
Every error is one line on stderr, "batonctl: <what failed>: <reason>", never a traceback: a
handler, the parser and the configuration raise `CommandFailed`, and `main` alone reports it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final, NoReturn, cast

from batonmq import __version__
from batonmq.cli import acl, db, users, vhosts
from batonmq.cli.broker import EXIT_USAGE
from batonmq.cli.flags import flag_error, flag_overrides
from batonmq.cli.storecommand import PROG, CommandFailed
from batonmq.config import CONFIG_FILE_VARIABLE, ENV_PREFIX, Config, ConfigError, load_config

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


class _Parser(argparse.ArgumentParser):
    """argparse's parser (and, as its class, every group's and command's), whose usage errors
    are one line: raised as CommandFailed with status 2 instead of printed with the usage."""

    def error(self, message: str) -> NoReturn:
        raise CommandFailed(f"{message} (see `{self.prog} --help`)", EXIT_USAGE)


def _parser() -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = _Parser(
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
    try:
        return _run(argv)
    except CommandFailed as failure:
        print(f"{PROG}: {failure}", file=sys.stderr)
        return failure.status
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _run(argv: Sequence[str] | None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit_:  # --help or --version, printed (usage errors raise CommandFailed)
        return exit_.code if isinstance(exit_.code, int) else 0
    try:
        config = load_config(args.config, overrides=flag_overrides(args, FLAG_KEYS))
    except ConfigError as error:
        raise CommandFailed(str(flag_error(error, FLAG_KEYS)), EXIT_USAGE) from None
    handler = cast(Handler, args.handler)
    return handler(args, config)


if __name__ == "__main__":
    raise SystemExit(main())
