"""``batonctl status``, ``metrics`` and ``log level``: the running broker as a whole, over its
HTTP API.

`status` is imqcmd's `query bkr`: the broker, its object and message totals, listeners and
alarms; like `rabbitmq-diagnostics check_alarms` it fails (69) while an alarm is raised.
`metrics` is its `metrics bkr -int N -msp K`: every N seconds a line of message rates (the
deltas of the broker's counters, per second) and totals, K times or until Ctrl-C.
`log level` shows or changes the level the broker logs at (MQ 3.5 admin guide, Table 2-7: the
broker then logs that level "and all higher categories") until it stops.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

from batonmq.cli.live import rates
from batonmq.cli.live.client import BrokerClient
from batonmq.cli.live.tables import fields, json_text
from batonmq.cli.storecommand import CommandFailed
from batonmq.config.schema import LOG_LEVELS
from batonmq.management.listing import Json

LOG_LEVEL_PATH = "/api/broker/log-level"
#: imqcmd's default interval between two metrics lines (-int), in seconds.
DEFAULT_INTERVAL = 5.0


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `status`, `metrics` and `log` to `groups` (see `batonmq.cli.ctl`)."""
    status = groups.add_parser(
        "status",
        help="(live) the broker's totals, listeners and alarms",
        description=(
            "The running broker: its totals, listeners and alarms (imqcmd query bkr). Exits "
            "with 69 while a resource alarm is raised, as rabbitmq-diagnostics check_alarms."
        ),
    )
    status.add_argument("--json", action="store_true", help="print the API's JSON")
    status.set_defaults(live=_status, what="cannot read the broker's status")

    metrics = groups.add_parser(
        "metrics",
        help="(live) message rates every few seconds",
        description=(
            "Every INTERVAL seconds, a line of message rates per second (in: published, out: "
            "delivered and got, acknowledged, confirmed, redelivered) over the interval and "
            "the totals at its end, COUNT times or until Ctrl-C (imqcmd metrics bkr -int)."
        ),
    )
    metrics.add_argument(
        "--interval",
        metavar="N",
        type=_seconds,
        default=DEFAULT_INTERVAL,
        help=f"seconds between lines (default {DEFAULT_INTERVAL:g})",
    )
    metrics.add_argument(
        "--count", metavar="K", type=_times, help="stop after K lines (default: never)"
    )
    metrics.set_defaults(live=_metrics, what="cannot read the broker's metrics")

    log = groups.add_parser(
        "log",
        help="(live) the broker's log level",
        description="Show or change the level the running broker logs at.",
    )
    settings = log.add_subparsers(
        title="settings", dest="setting", metavar="SETTING", required=True
    )
    level = settings.add_parser(
        "level",
        help="show the log level, or change it until the broker stops",
        description=(
            "Without LEVEL, show the broker's log level; with it, log at LEVEL and above "
            "until the broker stops (it starts again at its configured log.level)."
        ),
    )
    level.add_argument("level", metavar="LEVEL", nargs="?", choices=LOG_LEVELS)
    level.set_defaults(live=_log_level, what="cannot change the broker's log level")


def _seconds(text: str) -> float:
    """--interval's value: a number of seconds, more than 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds: {text!r}")
    return value


def _times(text: str) -> int:
    """--count's value: a whole number, at least 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1: {text!r}")
    return int(text)


def _status(args: argparse.Namespace, client: BrokerClient) -> int:
    """The status, and the exit status of RabbitMQ's `rabbitmq-diagnostics check_alarms`: 0
    without alarms, 69 (EX_UNAVAILABLE, its code for a failed check) while any is raised, the
    alarms named on stderr too."""
    overview = _object(client.get("/api/overview"))
    _, alarms = client.request("GET", "/api/health/checks/alarms", accept=(503,))
    _print_status(args, overview, alarms)
    raised = _alarms(alarms)
    if raised == "none":
        return 0
    print(f"batonctl: resource alarms in effect: {raised}", file=sys.stderr)
    return os.EX_UNAVAILABLE


def _print_status(args: argparse.Namespace, overview: dict[str, Json], alarms: Json) -> None:
    if args.json:
        print(json_text({"overview": overview, "alarms": alarms}))
        return
    totals = _section(overview, "object_totals")
    queued = _section(overview, "queue_totals")
    listeners = overview.get("listeners")
    print(
        fields(
            [
                ("Broker", overview.get("node")),
                ("Product", f"{overview.get('product_name')} {overview.get('product_version')}"),
                *((name.capitalize(), totals.get(name)) for name in _TOTALS),
                (
                    "Messages",
                    f"{queued.get('messages')} (ready {queued.get('messages_ready')}, "
                    f"unacknowledged {queued.get('messages_unacknowledged')})",
                ),
                ("Listeners", ", ".join(_listeners(listeners))),
                ("Alarms", _alarms(alarms)),
            ]
        )
    )


_TOTALS = ("connections", "channels", "exchanges", "queues", "consumers")


def _object(answer: Json) -> dict[str, Json]:
    if not isinstance(answer, dict):
        raise CommandFailed("the broker's answer is not a JSON object")
    return answer


def _section(overview: dict[str, Json], name: str) -> dict[str, Json]:
    section = overview.get(name)
    return section if isinstance(section, dict) else {}


def _listeners(listeners: Json) -> list[str]:
    return [
        f"{listener.get('protocol')} {listener.get('ip_address')}:{listener.get('port')}"
        for listener in (listeners if isinstance(listeners, list) else [])
        if isinstance(listener, dict)
    ]


def _alarms(answer: Json) -> str:
    """RabbitMQ's alarms check: {"status": "ok"}, or "failed" with the alarms in force."""
    if not isinstance(answer, dict) or answer.get("status") == "ok":
        return "none"
    raised = answer.get("alarms")
    return "; ".join(
        f"{alarm.get('resource')}: {alarm.get('reason')}"
        for alarm in (raised if isinstance(raised, list) else [])
        if isinstance(alarm, dict)
    )


def _metrics(args: argparse.Namespace, client: BrokerClient) -> int:
    interval: float = args.interval
    count: int | None = args.count
    try:
        before = _reading(client)
        print(rates.header(), flush=True)
        printed = 0
        while count is None or printed < count:
            time.sleep(interval)
            after = _reading(client)
            print(rates.line(time.strftime("%H:%M:%S"), before, after), flush=True)
            before, printed = after, printed + 1
    except KeyboardInterrupt:  # how `metrics` without --count ends
        pass
    return 0


def _reading(client: BrokerClient) -> rates.Reading:
    overview = _object(client.get("/api/overview"))
    return rates.Reading(time.monotonic(), overview)


def _log_level(args: argparse.Namespace, client: BrokerClient) -> int:
    if args.level is None:
        print(_object(client.get(LOG_LEVEL_PATH)).get("level"))
        return 0
    client.put(LOG_LEVEL_PATH, {"level": args.level})
    print(f"the broker logs at level {args.level} until it stops")
    return 0
