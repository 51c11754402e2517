"""``batonctl query bkr``, ``takeover bkr``, ``quiesce bkr``, ``unquiesce bkr`` and ``shutdown
bkr``: the members of a running broker's HA cluster, over its HTTP API (`list bkr` is one of
`batonctl list`'s tables).

The counterparts of imqcmd's subcommands for HA clusters (MQ 4.1 HA guide, Table 7). `takeover
bkr -n ID` asks the guide's confirmation when the member "appears to be running" (its store
lease runs): "The broker associated with ID last accessed the database # seconds ago. Do you want
to take over for this broker?"; answered yes (or with -f, which "suppresses this message and
initiates the takeover unconditionally"), the takeover is forced, which fences that member.
`quiesce`, `unquiesce` and `shutdown` act on the broker at --url, as imqcmd's on the broker at
-b; `shutdown` asks first, unless -y, and with `--time N` the broker shuts down N seconds later
("The new -time option specifies the interval, in seconds, to wait before shutting down the
broker"), which the output says, with the time.
"""

from __future__ import annotations

import argparse
from typing import Final

from batonmq.cli.live.client import BrokerClient, not_found_as, quoted
from batonmq.cli.live.confirm import confirm
from batonmq.cli.live.tables import fields, json_text
from batonmq.cli.storecommand import CommandFailed
from batonmq.management.listing import Json

PATH: Final = "/api/cluster/brokers"

#: `query bkr`'s lines: label, field.
_BROKER_FIELDS: Final = (
    ("Broker ID", "broker_id"),
    ("Address", "address"),
    ("State", "state"),
    ("Msgs in store", "messages"),
    ("ID of broker performing takeover", "taken_over_by"),
    ("Last heartbeat", "last_heartbeat"),
    ("Seconds since", "silent_for"),
    ("Store lease running", "lease_live"),
    ("No failover", "no_failover"),
    ("Heartbeat address", "heartbeat_address"),
    ("Version", "version"),
    ("This broker", "local"),
)


def add_query(objects: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`batonctl query bkr [-n ID]`, among `query`'s objects."""
    query = objects.add_parser(
        "bkr",
        help="a member of the HA cluster",
        description="Show a member of the running broker's HA cluster, by default the broker "
        "itself (imqcmd query bkr).",
    )
    _broker_option(query, required=False)
    query.add_argument("--json", action="store_true", help="print the API's JSON")
    query.set_defaults(live=_query, what="cannot query the broker")


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `takeover`, `quiesce`, `unquiesce` and `shutdown` (each of object `bkr`)."""
    takeover = _bkr_command(
        groups,
        "takeover",
        "(live) take a member of the HA cluster over",
        "Take member ID's persistent state over into the broker at --url (imqcmd takeover "
        "bkr); asks first when ID still runs, unless -f or -y.",
    )
    _broker_option(takeover, required=True)
    takeover.add_argument(
        "-f", "--force", action="store_true", help="take it over unconditionally, without asking"
    )
    takeover.add_argument("-y", "--yes", action="store_true", help="answer yes to the question")
    takeover.set_defaults(live=_take_over, what="cannot take broker '{broker}' over")

    for verb, text in (
        ("quiesce", "refuse new client connections, serve the open ones"),
        ("unquiesce", "accept new client connections again"),
    ):
        command = _bkr_command(
            groups, verb, f"(live) {text}", f"The broker at --url: {text} (imqcmd {verb} bkr)."
        )
        command.set_defaults(live=_quiesce, verb=verb, what=f"cannot {verb} the broker")

    shutdown = _bkr_command(
        groups,
        "shutdown",
        "(live) shut the broker down",
        "Shut the broker at --url down (imqcmd shutdown bkr); asks first, unless -y.",
    )
    shutdown.add_argument(
        "--nofailover",
        action="store_true",
        help="no other member of its HA cluster is to take its persistent state over",
    )
    shutdown.add_argument(
        "--time",
        type=_seconds,
        default=0,
        metavar="N",
        help="the seconds to wait before shutting down (imqcmd -time)",
    )
    shutdown.add_argument("-y", "--yes", action="store_true", help="do it without asking")
    shutdown.set_defaults(live=_shut_down, what="cannot shut the broker down")


def _seconds(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"not a whole number of seconds: {text!r}")
    return int(text)


def _bkr_command(
    groups: argparse._SubParsersAction[argparse.ArgumentParser],
    verb: str,
    help_text: str,
    description: str,
) -> argparse.ArgumentParser:
    """`batonctl VERB bkr ...`; the parser of its `bkr`."""
    group = groups.add_parser(verb, help=help_text, description=description)
    objects = group.add_subparsers(title="objects", dest="object", metavar="OBJECT", required=True)
    return objects.add_parser("bkr", help="a broker", description=description)


def _broker_option(command: argparse.ArgumentParser, *, required: bool) -> None:
    command.add_argument(
        "-n", dest="broker", metavar="ID", required=required, help="the member's broker id"
    )


def _member(client: BrokerClient, broker_id: str | None) -> dict[str, Json]:
    """Member `broker_id` as the cluster lists it; None: the broker at --url."""
    if broker_id is None:
        listed = client.get(PATH)
        members = listed if isinstance(listed, list) else []
        found = next((m for m in members if isinstance(m, dict) and m.get("local")), None)
    else:
        with not_found_as(f"there is no broker '{broker_id}' in the cluster"):
            found = _object(client.get(f"{PATH}/{quoted(broker_id)}"))
    if found is None:
        raise CommandFailed("the broker's answer does not list the broker itself")
    return found


def _object(answer: Json) -> dict[str, Json]:
    if not isinstance(answer, dict):
        raise CommandFailed("the broker's answer is not a JSON object")
    return answer


def _query(args: argparse.Namespace, client: BrokerClient) -> int:
    member = _member(client, args.broker)
    if args.json:
        print(json_text(member))
    else:
        print(fields([(label, member.get(field)) for label, field in _BROKER_FIELDS]))
    return 0


def _take_over(args: argparse.Namespace, client: BrokerClient) -> int:
    broker_id: str = args.broker
    member = _member(client, broker_id)
    force = bool(args.force)
    if not force and member.get("lease_live"):
        silent = member.get("silent_for")
        seconds = round(silent) if isinstance(silent, int | float) else "?"
        confirm(
            f"The broker associated with {broker_id} last accessed the database {seconds} "
            "seconds ago. Do you want to take over for this broker?",
            args.yes,
        )
        force = True
    outcome = _object(client.post(f"{PATH}/{quoted(broker_id)}/takeover", {"force": force}))
    if not outcome.get("taken_over"):
        raise CommandFailed(str(outcome.get("reason")))
    print(
        f"took broker '{broker_id}' over: {outcome.get('messages')} messages in "
        f"{outcome.get('queues')} queues, in {outcome.get('seconds')} s"
    )
    return 0


def _quiesce(args: argparse.Namespace, client: BrokerClient) -> int:
    broker_id = str(_member(client, None).get("broker_id"))
    client.put(f"{PATH}/{quoted(broker_id)}/{args.verb}")
    state = _member(client, broker_id).get("state")
    print(f"{args.verb}d broker '{broker_id}' ({state})")
    return 0


def _shut_down(args: argparse.Namespace, client: BrokerClient) -> int:
    broker_id = str(_member(client, None).get("broker_id"))
    seconds: int = args.time
    failover = "; no other broker will take it over" if args.nofailover else ""
    later = f" in {seconds} s" if seconds else ""
    confirm(f"Shut broker '{broker_id}' down{later}{failover}?", args.yes)
    outcome = _object(
        client.post(
            f"{PATH}/{quoted(broker_id)}/shutdown",
            {"nofailover": bool(args.nofailover), "time": seconds},
        )
    )
    if seconds:
        print(
            f"broker '{broker_id}' will shut down in {seconds} s, at "
            f"{outcome.get('shutdown_at')}{failover}"
        )
    else:
        print(f"broker '{broker_id}' is shutting down{failover}")
    return 0
