"""``batonctl definitions export|import FILE``: the running broker's definitions (users,
virtual hosts, exchanges, queues, bindings) as RabbitMQ's definitions document, over
GET and POST /api/definitions (for administrators).

An export holds the users' password hashes: the file is written readable by its owner only.
An import merges, as RabbitMQ's does: what is missing is declared, what exists is left as it
is. FILE `-` is stdout or stdin.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from batonmq.cli.live.client import BrokerClient
from batonmq.cli.storecommand import CommandFailed
from batonmq.management.listing import Json

PATH = "/api/definitions"
STDIO = "-"


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `definitions` and its commands to `groups` (see `batonmq.cli.ctl`)."""
    group = groups.add_parser(
        "definitions",
        help="(live) export or import the broker's definitions",
        description=__doc__.split("\n\n", 1)[1].strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = group.add_subparsers(
        title="commands", dest="command", metavar="COMMAND", required=True
    )
    export = commands.add_parser(
        "export",
        help="write the definitions to FILE",
        description="Write the broker's definitions to FILE (mode 0600), or stdout (-).",
    )
    export.add_argument("file", metavar="FILE")
    export.set_defaults(live=_export, what="cannot export the definitions to {file}")
    load = commands.add_parser(
        "import",
        help="merge the definitions of FILE into the broker",
        description="Declare what the definitions in FILE (or stdin: -) hold that the broker "
        "lacks; what it has is left as it is.",
    )
    load.add_argument("file", metavar="FILE")
    load.set_defaults(live=_import, what="cannot import the definitions of {file}")


def _export(args: argparse.Namespace, client: BrokerClient) -> int:
    text = json.dumps(client.get(PATH), indent=2, ensure_ascii=False) + "\n"
    if args.file == STDIO:
        sys.stdout.write(text)
        return 0
    path = Path(args.file)
    try:
        # Created 0600 (an existing file keeps its mode): the document holds password hashes.
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(text)
    except OSError as error:
        raise CommandFailed(f"{path}: {error.strerror or error}") from None
    print(f"exported the definitions to {path}")
    return 0


def _import(args: argparse.Namespace, client: BrokerClient) -> int:
    try:
        if args.file == STDIO:
            text = sys.stdin.read()
        else:
            text = Path(args.file).read_text(encoding="utf-8")
        document: Json = json.loads(text)
    except OSError as error:
        raise CommandFailed(error.strerror or str(error)) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CommandFailed(f"not a JSON document: {error}") from None
    if not isinstance(document, dict):
        raise CommandFailed("not a definitions document (a JSON object)")
    client.post(PATH, document)
    print(f"imported the definitions of {args.file}")
    return 0
