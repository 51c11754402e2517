"""``batonctl list|query|purge|delete|pause|resume|close``: a running broker's queues, exchanges,
bindings, connections, channels, consumers, users and virtual hosts, over its HTTP API.

The counterparts of imqcmd's `list dst`, `query dst`, `purge dst`, `destroy dst`, `pause dst`,
`resume dst` and `destroy cxn` (MQ 3.5 admin guide). As imqcmd, a command that loses messages
(`purge queue`, `delete queue`) asks before it does it, unless -y; without a terminal to ask on
it is refused.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Final

from batonmq.cli.broker import EXIT_USAGE
from batonmq.cli.live import cluster
from batonmq.cli.live.client import BrokerClient, not_found_as, quoted
from batonmq.cli.live.confirm import confirm
from batonmq.cli.live.tables import Column, fields, json_text, table
from batonmq.cli.storecommand import CommandFailed
from batonmq.management.listing import Json

#: The virtual host a command means without --vhost (RabbitMQ's and BatonMQ's default).
DEFAULT_VHOST: Final = "/"


@dataclass(frozen=True, slots=True)
class Listing:
    """What `batonctl list KIND` asks for and shows."""

    path: str
    columns: tuple[Column, ...]
    #: Whether the API lists one virtual host's (path/{vhost}); else --vhost filters the
    #: items by their `vhost` field, or is refused when they have none.
    per_vhost: bool = False
    in_vhosts: bool = True


_VHOST = Column("VHOST", "vhost")
LISTINGS: Final = {
    "queues": Listing(
        "/api/queues",
        (
            _VHOST,
            Column("NAME", "name"),
            Column("TYPE", "type"),
            Column("DURABLE", "durable"),
            Column("PAUSED", "paused"),
            Column("MESSAGES", "messages"),
            Column("READY", "messages_ready"),
            Column("UNACKED", "messages_unacknowledged"),
            Column("CONSUMERS", "consumers"),
        ),
        per_vhost=True,
    ),
    "exchanges": Listing(
        "/api/exchanges",
        (
            _VHOST,
            Column("NAME", "name"),
            Column("TYPE", "type"),
            Column("DURABLE", "durable"),
            Column("AUTO_DELETE", "auto_delete"),
            Column("INTERNAL", "internal"),
        ),
        per_vhost=True,
    ),
    "bindings": Listing(
        "/api/bindings",
        (
            _VHOST,
            Column("SOURCE", "source"),
            Column("DESTINATION", "destination"),
            Column("TYPE", "destination_type"),
            Column("ROUTING_KEY", "routing_key"),
            Column("ARGUMENTS", "arguments"),
        ),
        per_vhost=True,
    ),
    "connections": Listing(
        "/api/connections",
        (
            Column("NAME", "name"),
            Column("USER", "user"),
            _VHOST,
            Column("CHANNELS", "channels"),
            Column("RECV_BYTES", "recv_oct"),
            Column("SENT_BYTES", "send_oct"),
        ),
    ),
    "channels": Listing(
        "/api/channels",
        (
            Column("NAME", "name"),
            Column("USER", "user"),
            _VHOST,
            Column("CONSUMERS", "consumer_count"),
            Column("UNACKED", "messages_unacknowledged"),
            Column("PREFETCH", "prefetch_count"),
        ),
    ),
    "consumers": Listing(
        "/api/consumers",
        (
            Column("VHOST", "queue.vhost"),
            Column("QUEUE", "queue.name"),
            Column("TAG", "consumer_tag"),
            Column("CHANNEL", "channel_details.name"),
            Column("ACK", "ack_required"),
            Column("PREFETCH", "prefetch_count"),
        ),
        per_vhost=True,
    ),
    "users": Listing(
        "/api/users", (Column("NAME", "name"), Column("TAGS", "tags")), in_vhosts=False
    ),
    "permissions": Listing(
        "/api/permissions",
        (
            Column("USER", "user"),
            _VHOST,
            Column("CONFIGURE", "configure"),
            Column("WRITE", "write"),
            Column("READ", "read"),
        ),
    ),
    "vhosts": Listing(
        "/api/vhosts",
        (
            Column("NAME", "name"),
            Column("MESSAGES", "messages"),
            Column("READY", "messages_ready"),
            Column("UNACKED", "messages_unacknowledged"),
        ),
        in_vhosts=False,
    ),
    # imqcmd list bkr (MQ 4.1 HA guide, Example 1): the members of the broker's HA cluster.
    "bkr": Listing(
        cluster.PATH,
        (
            Column("BROKER_ID", "broker_id"),
            Column("ADDRESS", "address"),
            Column("STATE", "state"),
            Column("MSGS_IN_STORE", "messages"),
            Column("TAKEN_OVER_BY", "taken_over_by"),
            Column("SECONDS_SINCE_HEARTBEAT", "silent_for"),
            Column("NO_FAILOVER", "no_failover"),
        ),
        in_vhosts=False,
    ),
}

#: `query queue`'s lines: label, field.
_QUEUE_FIELDS: Final = (
    ("Name", "name"),
    ("Virtual host", "vhost"),
    ("Type", "type"),
    ("Durable", "durable"),
    ("Auto-delete", "auto_delete"),
    ("Exclusive", "exclusive"),
    ("Delivery paused", "paused"),
    ("Messages", "messages"),
    ("Ready", "messages_ready"),
    ("Unacknowledged", "messages_unacknowledged"),
    ("Consumers", "consumers"),
    ("Arguments", "arguments"),
)


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `list`, `query`, `purge`, `delete`, `pause`, `resume` and `close` to `groups`
    (`query bkr`: `batonmq.cli.live.cluster`)."""
    listing = groups.add_parser(
        "list",
        help="(live) list queues, exchanges, bindings, connections, channels, consumers, "
        "users, permissions, virtual hosts or the brokers of an HA cluster",
        description="List objects of the running broker as a table (imqcmd list dst).",
    )
    listing.add_argument("kind", metavar="|".join(LISTINGS), choices=list(LISTINGS))
    listing.add_argument("--vhost", metavar="VHOST", help="only this virtual host's")
    _json_option(listing)
    listing.set_defaults(live=_list, what="cannot list {kind}")

    query_objects, query = _queue_command(
        groups, "query", "(live) show a queue or a broker", "Show a queue (imqcmd query dst)."
    )
    _json_option(query)
    query.set_defaults(live=_query, what="cannot query queue '{name}' in virtual host '{vhost}'")
    cluster.add_query(query_objects)

    _, purge = _queue_command(
        groups,
        "purge",
        "(live) remove a queue's ready messages",
        "Remove a queue's ready messages (imqcmd purge dst); asks first, unless -y.",
    )
    _yes_option(purge)
    purge.set_defaults(live=_purge, what="cannot purge queue '{name}' in virtual host '{vhost}'")

    _, delete = _queue_command(
        groups,
        "delete",
        "(live) delete a queue and its messages",
        "Delete a queue and its messages (imqcmd destroy dst); asks first, unless -y.",
    )
    _yes_option(delete)
    delete.add_argument("--if-empty", action="store_true", help="only if it holds no message")
    delete.add_argument("--if-unused", action="store_true", help="only if it has no consumer")
    delete.set_defaults(live=_delete, what="cannot delete queue '{name}' in virtual host '{vhost}'")

    for verb, paused, help_text in (
        ("pause", True, "stop delivery to a queue's consumers (imqcmd pause dst)"),
        ("resume", False, "resume delivery to a queue's consumers (imqcmd resume dst)"),
    ):
        _, command = _queue_command(
            groups,
            verb,
            f"(live) {help_text.split(' (')[0]}",
            f"{help_text[0].upper()}{help_text[1:]}; the queue still takes messages.",
        )
        command.set_defaults(
            live=_pause,
            paused=paused,
            what=f"cannot {verb} queue '{{name}}' in virtual host '{{vhost}}'",
        )

    close = groups.add_parser(
        "close",
        help="(live) close a client's connection",
        description="Close a client's connection, with 320 CONNECTION_FORCED and the reason "
        "(imqcmd destroy cxn). NAME is as `batonctl list connections` shows it.",
    )
    close_kinds = close.add_subparsers(
        title="objects", dest="object", metavar="OBJECT", required=True
    )
    connection = close_kinds.add_parser(
        "connection", help="a client's connection", description=close.description
    )
    connection.add_argument("name", metavar="NAME")
    connection.add_argument(
        "--reason", metavar="TEXT", default="Closed by batonctl", help="what the client is told"
    )
    connection.set_defaults(live=_close, what="cannot close connection '{name}'")


def _queue_command(
    groups: argparse._SubParsersAction[argparse.ArgumentParser],
    verb: str,
    help_text: str,
    description: str,
) -> tuple[argparse._SubParsersAction[argparse.ArgumentParser], argparse.ArgumentParser]:
    """`batonctl VERB queue NAME [--vhost VHOST]`; its objects, and the parser of `queue`."""
    group = groups.add_parser(verb, help=help_text, description=description)
    objects = group.add_subparsers(title="objects", dest="object", metavar="OBJECT", required=True)
    command = objects.add_parser("queue", help="a queue", description=description)
    command.add_argument("name", metavar="NAME")
    command.add_argument(
        "--vhost", metavar="VHOST", default=DEFAULT_VHOST, help="its virtual host (default: /)"
    )
    return objects, command


def _json_option(command: argparse.ArgumentParser) -> None:
    command.add_argument("--json", action="store_true", help="print the API's JSON")


def _yes_option(command: argparse.ArgumentParser) -> None:
    command.add_argument("-y", "--yes", action="store_true", help="do it without asking")


def _items(answer: Json) -> list[dict[str, Json]]:
    if not isinstance(answer, list):
        raise CommandFailed("the broker's answer is not a list")
    return [item for item in answer if isinstance(item, dict)]


def _list(args: argparse.Namespace, client: BrokerClient) -> int:
    listing = LISTINGS[args.kind]
    vhost: str | None = args.vhost
    if vhost is not None and not listing.in_vhosts:
        raise CommandFailed(
            f"{args.kind} are not in a virtual host: --vhost does not apply", EXIT_USAGE
        )
    if vhost is not None and listing.per_vhost:
        with not_found_as(f"there is no virtual host '{vhost}'"):
            items = _items(client.get(f"{listing.path}/{quoted(vhost)}"))
    else:
        items = _items(client.get(listing.path))
        if vhost is not None:
            items = [item for item in items if item.get("vhost") == vhost]
    if args.json:
        whole: list[Json] = list(items)
        print(json_text(whole))
    else:
        print(table(listing.columns, items))
    return 0


def _queue(client: BrokerClient, args: argparse.Namespace) -> dict[str, Json]:
    answer = client.get(f"/api/queues/{quoted(args.vhost, args.name)}")
    if not isinstance(answer, dict):
        raise CommandFailed("the broker's answer is not a queue")
    return answer


def _query(args: argparse.Namespace, client: BrokerClient) -> int:
    queue = _queue(client, args)
    if args.json:
        print(json_text(queue))
    else:
        print(fields([(label, queue.get(field)) for label, field in _QUEUE_FIELDS]))
    return 0


def _purge(args: argparse.Namespace, client: BrokerClient) -> int:
    where = f"queue '{args.name}' in virtual host '{args.vhost}'"
    ready = _queue(client, args).get("messages_ready")
    confirm(f"Purge the {ready} ready messages of {where}?", args.yes)
    client.delete(f"/api/queues/{quoted(args.vhost, args.name)}/contents")
    print(f"purged {where}")
    return 0


def _delete(args: argparse.Namespace, client: BrokerClient) -> int:
    where = f"queue '{args.name}' in virtual host '{args.vhost}'"
    messages = _queue(client, args).get("messages")
    confirm(f"Delete {where} and its {messages} messages?", args.yes)
    conditions = [
        f"{name}=true"
        for name, wanted in (("if-empty", args.if_empty), ("if-unused", args.if_unused))
        if wanted
    ]
    query = f"?{'&'.join(conditions)}" if conditions else ""
    client.delete(f"/api/queues/{quoted(args.vhost, args.name)}{query}")
    print(f"deleted {where}")
    return 0


def _pause(args: argparse.Namespace, client: BrokerClient) -> int:
    verb = "pause" if args.paused else "resume"
    client.put(f"/api/queues/{quoted(args.vhost, args.name)}/{verb}")
    state = "paused" if args.paused else "resumed"
    print(f"{state} delivery from queue '{args.name}' in virtual host '{args.vhost}'")
    return 0


def _close(args: argparse.Namespace, client: BrokerClient) -> int:
    client.delete(f"/api/connections/{quoted(args.name)}", headers={"X-Reason": args.reason})
    print(f"closed connection '{args.name}'")
    return 0
