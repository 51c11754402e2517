"""Asking the operator before a live command does what cannot be undone (imqcmd: "Are you sure
...? (y/n)")."""

from __future__ import annotations

import sys

from batonmq.cli.storecommand import CommandFailed


def confirm(question: str, assume_yes: bool) -> None:
    """Ask `question` on the terminal; CommandFailed unless the answer is yes. -y answers yes;
    without a terminal to ask on (a script, a pipe) the command is refused rather than run
    unasked."""
    if assume_yes:
        return
    if sys.stdin is None or not sys.stdin.isatty():
        raise CommandFailed("no terminal to ask for confirmation on: give -y to do it unasked")
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    answer = sys.stdin.readline().strip().lower()
    if answer not in ("y", "yes"):
        raise CommandFailed("not confirmed")
