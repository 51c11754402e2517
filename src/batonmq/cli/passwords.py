"""What `batonctl user add` and `user passwd` take from the operator, on the store or on a
running broker: a user name that can log in, and the password, from --password, from the
first line of stdin (--password-stdin), or typed twice on the terminal."""

from __future__ import annotations

import argparse
import getpass
import sys

from batonmq.cli.storecommand import CommandFailed


def check_user_name(name: str) -> None:
    """CommandFailed for a name no login could give: empty, with spaces around it, or with a
    ":" (which ends the name in HTTP basic authentication and in the seed's password files)."""
    if not name or name != name.strip() or ":" in name:
        raise CommandFailed(f"invalid user name {name!r}")


def add_password_options(command: argparse.ArgumentParser) -> None:
    """--password and --password-stdin (at most one of them) on `command`."""
    source = command.add_mutually_exclusive_group()
    source.add_argument("--password", metavar="PW", help="the password (visible to `ps`)")
    source.add_argument(
        "--password-stdin", action="store_true", help="read the password from stdin"
    )


def new_password(args: argparse.Namespace) -> str:
    """The password the options of `add_password_options` give for the user `args.name`."""
    if args.password is not None:
        password: str = args.password
    elif args.password_stdin:
        password = _stdin_line()
    else:
        password = _asked(args.name)
    if not password:
        raise CommandFailed("the password is empty")
    return password


def _stdin_line() -> str:
    """The first line of stdin, without its end ("" at the end of input). Decoded strictly:
    a password is UTF-8 text (sys.stdin would let undecodable bytes in as surrogates)."""
    if sys.stdin is None:
        raise CommandFailed("cannot read the password: stdin is closed")
    try:
        return sys.stdin.buffer.readline().decode("utf-8").rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as error:
        raise CommandFailed(f"cannot read the password from stdin: {error}") from None


def _asked(name: str) -> str:
    """The password typed twice on the terminal. Without one, getpass would read stdin with
    the echo on, after warnings over several lines: refused instead, naming the way to go."""
    if sys.stdin is None or not sys.stdin.isatty():
        raise CommandFailed("no terminal to ask for the password on: give it with --password-stdin")
    try:
        password = getpass.getpass(f"Password for {name}: ")
        again = getpass.getpass("Again: ")
    except EOFError:  # Ctrl-D at the prompt
        raise CommandFailed("no password given (end of input)") from None
    if again != password:
        raise CommandFailed("the passwords do not match")
    return password
