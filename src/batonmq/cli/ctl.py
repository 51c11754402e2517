"""``batonctl``: administer a BatonMQ broker, running (over its HTTP API) or stopped (its data).

    batonctl [--url URL] [--user USER] [--password PW | --password-file FILE] [--cacert FILE]
             GROUP COMMAND
    batonctl [--config FILE] [--data-dir DIR] [--store sqlite|postgres] [--dsn DSN] GROUP COMMAND

The live commands (`batonmq.cli.live`: status, list, query, purge, delete, pause, resume,
close, metrics, log, definitions, and takeover, quiesce, unquiesce, shutdown for an HA cluster's
brokers; the counterparts of Open MQ's imqcmd) talk to a running
broker's management HTTP API at --url. The data commands work on a stopped broker's data,
which the options of the second form select the same way as for ``batonmq`` (the same file,
the same BATONMQ__SECTION__KEY variables, flags winning over both): ``db`` (`batonmq.cli.db`,
the counterpart of imqdbmgr), ``acl`` (`batonmq.cli.acl`), and ``user``, ``vhost`` and
``permissions`` (`batonmq.cli.users`, `batonmq.cli.vhosts`, `batonmq.cli.permissions`), whose
add, delete, passwd, tags, list, set and clear are both: they
go to the data when something names it (`names_data`) and no live option is given, else to the
running broker (`choose`).

Each group of commands lives in a module of its own, which `GROUPS` lists. A group module has
one function, ``register(groups)``, which adds the group's parser to `groups` and gives each
of its commands a ``handler`` default (a data command: called with the parsed arguments and
the loaded configuration) and/or a ``live`` one (called with the parsed arguments and a
`BrokerClient`, with a ``what`` default: the failure's "cannot ..." text, formatted with the
arguments); each returns the exit status.

Exit codes, as for ``batonmq``: 0 done, 2 a usage or configuration error, 1 the command failed.
Every error is one line on stderr, "batonctl: <what failed>: <reason>", never a traceback: a
handler, the parser and the configuration raise `CommandFailed`, and `main` alone reports it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final, Literal, NoReturn, cast

from batonmq import __version__
from batonmq.cli import acl, db, permissions, users, vhosts
from batonmq.cli.broker import EXIT_USAGE
from batonmq.cli.flags import flag_error, flag_overrides
from batonmq.cli.live import cluster, definitions, node, objects
from batonmq.cli.live.client import (
    DEFAULT_URL,
    PASSWORD_VARIABLE,
    URL_VARIABLE,
    USER_VARIABLE,
    ApiRefused,
    BrokerClient,
    api_url,
    credentials,
    tls_context,
)
from batonmq.cli.storecommand import PROG, CommandFailed
from batonmq.config import CONFIG_FILE_VARIABLE, ENV_PREFIX, Config, ConfigError, load_config

#: Exit status after Ctrl-C (128 + SIGINT, as a shell reports it).
EXIT_INTERRUPTED: Final = 130

#: Runs one data command: (parsed arguments, configuration) -> exit status.
Handler = Callable[[argparse.Namespace, Config], int]
#: Runs one live command: (parsed arguments, the running broker's API) -> exit status.
LiveHandler = Callable[[argparse.Namespace, BrokerClient], int]

#: Each group module's `register`, in the order `batonctl --help` lists them.
GROUPS: Final[tuple[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None], ...]] = (
    node.register,
    objects.register,
    cluster.register,
    definitions.register,
    users.register,
    vhosts.register,
    permissions.register,
    db.register,
    acl.register,
)

#: Each configuration flag and the dotted key it overrides.
FLAG_KEYS: Final = {
    "--data-dir": "broker.data_dir",
    "--store": "persist.store",
    "--dsn": "persist.postgres.dsn",
}
#: The options that select a stopped broker's data (and its configuration), by attribute.
DATA_OPTIONS: Final = {
    "--config": "config",
    "--data-dir": "data_dir",
    "--store": "store",
    "--dsn": "dsn",
}
#: The options of the live commands, by attribute.
LIVE_OPTIONS: Final = {
    "--url": "url",
    "--user": "api_user",
    "--password": "api_password",
    "--password-file": "password_file",
    "--cacert": "cacert",
}
#: The variables that name a broker's data: the configuration file, and the keys that place
#: the data.
_DATA_VARIABLES: Final = (f"{ENV_PREFIX}BROKER__DATA_DIR", f"{ENV_PREFIX}PERSIST__")


class _Parser(argparse.ArgumentParser):
    """argparse's parser (and, as its class, every group's and command's), whose usage errors
    are one line: raised as CommandFailed with status 2 instead of printed with the usage."""

    def error(self, message: str) -> NoReturn:
        raise CommandFailed(f"{message} (see `{self.prog} --help`)", EXIT_USAGE)


def _parser() -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = _Parser(
        prog=PROG,
        description=(
            "Administer a BatonMQ broker: a running one over its management HTTP API (the "
            "commands marked live), or a stopped one's data (db, acl; user and vhost)."
        ),
        epilog=(
            "user add|passwd|tags|delete, vhost add|delete and permissions list|set|clear go "
            "to the running broker, "
            "unless the broker's data is named (by --data-dir, --store, --dsn or --config, or "
            f"by {CONFIG_FILE_VARIABLE}, {ENV_PREFIX}BROKER__DATA_DIR or a "
            f"{ENV_PREFIX}PERSIST__KEY variable) and no option of the running broker's (--url, "
            "--user ...) is given: then they work on that data, while no broker runs on it. "
            "The data options select the broker's configuration as for batonmq: "
            f"the file may also be named by {CONFIG_FILE_VARIABLE}, and any key set as "
            f"{ENV_PREFIX}SECTION__KEY (for example {ENV_PREFIX}PERSIST__POSTGRES__DSN, which "
            "keeps a password off the command line). Flags win over the environment, which "
            f"wins over the file. The live commands log in as --user (else {USER_VARIABLE}, "
            "else guest) with --password, the first line of --password-file (which only its "
            f"owner may read: chmod 600), {PASSWORD_VARIABLE} or guest; the user needs a "
            "management tag, and administrator for users, virtual hosts, permissions, "
            "definitions and the log level. Exit status: 0 done, 1 the command failed, 2 a "
            "usage or configuration error."
        ),
    )
    live = parser.add_argument_group("a running broker (live commands)")
    live.add_argument(
        "--url",
        metavar="URL",
        help=f"its management HTTP API (else {URL_VARIABLE}, else {DEFAULT_URL})",
    )
    live.add_argument("--user", metavar="USER", dest="api_user", help="who logs in to the API")
    secret = live.add_mutually_exclusive_group()
    secret.add_argument(
        "--password", metavar="PW", dest="api_password", help="the password (visible to `ps`)"
    )
    secret.add_argument(
        "--password-file", metavar="FILE", type=Path, help="its first line is the password"
    )
    live.add_argument(
        "--cacert",
        metavar="FILE",
        type=Path,
        help="for an https URL: the certificate authority to trust (else the system's)",
    )
    data = parser.add_argument_group("a stopped broker's data")
    data.add_argument("--config", metavar="FILE", type=Path, help="TOML configuration file")
    # Passed to load_config as given, so that it validates them in the words it uses for the
    # file and the environment.
    data.add_argument("--data-dir", metavar="DIR", help="the broker's data directory")
    data.add_argument("--store", metavar="sqlite|postgres", help="the store to use (persist.store)")
    data.add_argument(
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
    if choose(args, os.environ) == "live":
        return _run_live(args, cast(LiveHandler, args.live))
    try:
        config = load_config(args.config, overrides=flag_overrides(args, FLAG_KEYS))
    except ConfigError as error:
        raise CommandFailed(str(flag_error(error, FLAG_KEYS)), EXIT_USAGE) from None
    handler = cast(Handler, args.handler)
    return handler(args, config)


def _run_live(args: argparse.Namespace, live: LiveHandler) -> int:
    """A live command; a failure is reported as "<what>: <reason>"."""
    what = str(args.what).format_map(vars(args))
    try:
        login = credentials(args.api_user, args.api_password, args.password_file, os.environ)
        tls = tls_context(args.cacert)
        return live(args, BrokerClient(api_url(args.url, os.environ), login, tls))
    except ApiRefused as refusal:
        raise CommandFailed(f"{what}: {refusal}") from None
    except CommandFailed as failure:
        raise CommandFailed(f"{what}: {failure}", failure.status) from None


def choose(args: argparse.Namespace, environ: Mapping[str, str]) -> Literal["live", "data"]:
    """How to run the parsed command: "live" or on the "data". A command that is only one runs
    as that one, and an option of the other kind is a usage error (--url for a data command,
    --data-dir for a live one, or both at once). A command that is both (user add ...) runs
    live when a live option is given, else on the data when `names_data`, else live."""
    live, data = hasattr(args, "live"), hasattr(args, "handler")
    live_given, data_given = _given(args, LIVE_OPTIONS), _given(args, DATA_OPTIONS)
    words = ("group", "command", "object", "setting")
    command = " ".join(getattr(args, word) for word in words if hasattr(args, word))
    if live_given and data_given:
        raise CommandFailed(
            f"{live_given[0]} is for a running broker and {data_given[0]} for a stopped one's "
            "data: give one kind",
            EXIT_USAGE,
        )
    if live_given and not live:
        raise CommandFailed(
            f"`{command}` works on a stopped broker's data: {live_given[0]} is for a running one",
            EXIT_USAGE,
        )
    if data_given and not data:
        raise CommandFailed(
            f"`{command}` talks to a running broker: {data_given[0]} is for a stopped one's data",
            EXIT_USAGE,
        )
    if not live:
        return "data"
    if not data or live_given:
        return "live"
    return "data" if names_data(args, environ) else "live"


def names_data(args: argparse.Namespace, environ: Mapping[str, str]) -> bool:
    """Whether the options or the environment name a broker's data (DATA_OPTIONS, and the
    variables that do the same): a command that works both ways then works on it."""
    return bool(_given(args, DATA_OPTIONS)) or any(
        (name == CONFIG_FILE_VARIABLE and value) or name.startswith(_DATA_VARIABLES)
        for name, value in environ.items()
    )


def _given(args: argparse.Namespace, options: Mapping[str, str]) -> list[str]:
    """Those of `options` (flag: attribute) that the command line gave."""
    return [flag for flag, name in options.items() if getattr(args, name) is not None]


if __name__ == "__main__":
    raise SystemExit(main())
