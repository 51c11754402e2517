"""The open connections counted against `limits.max_connections_per_user` and
`limits.max_connections_per_vhost` (RabbitMQ's user and vhost `max-connections`).

A broker of one process counts its own (`LocalAdmission`). A broker of several workers counts
them all in its first worker (`batonmq.server.brokerwide`), which asks this count for every
worker and keeps each worker's connections apart: a worker that ends takes its connections
out of the count (`worker_ended`), and a worker gives the first the connections it holds when
the first starts again with an empty count (`replace`).

The count answers through callbacks (`ConnectionAdmission`), because a count kept in another
process answers later.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Protocol, TypeVar

#: A connection's user and virtual host.
Pair = tuple[str, str]
_K = TypeVar("_K")


class ConnectionCount:
    """Open connections (connection.open accepted, not yet ended) by worker, user and virtual
    host, with the totals by user and by virtual host kept as they open and end, so that
    checking a limit is not a walk over all of them."""

    def __init__(self, max_per_user: int = 0, max_per_vhost: int = 0) -> None:
        """0: no limit."""
        self.max_per_user = max_per_user
        self.max_per_vhost = max_per_vhost
        self.by_user: Counter[str] = Counter()
        self.by_vhost: Counter[str] = Counter()
        self._by_worker: dict[int, Counter[Pair]] = {}

    @property
    def limited(self) -> bool:
        """Whether a limit is set: with none, the workers need not count together."""
        return bool(self.max_per_user or self.max_per_vhost)

    def refusal(self, user: str, vhost: str) -> str | None:
        """Why one more connection of `user` to `vhost` would go over a limit, or None.

        The texts are RabbitMQ's (rabbit_reader: "access to vhost '~s' refused for user '~s':
        connection limit (~p) is reached" and "Connection refused for user '~s': user
        connection limit (~p) is reached"), with the configuration key that sets the limit;
        the virtual host's limit is checked first, as RabbitMQ does."""
        if self.max_per_vhost and self.by_vhost[vhost] >= self.max_per_vhost:
            return (
                f"access to vhost '{vhost}' refused for user '{user}': connection limit "
                f"({self.max_per_vhost}) is reached (limits.max_connections_per_vhost)"
            )
        if self.max_per_user and self.by_user[user] >= self.max_per_user:
            return (
                f"Connection refused for user '{user}': user connection limit "
                f"({self.max_per_user}) is reached (limits.max_connections_per_user)"
            )
        return None

    def admit(self, worker: int, user: str, vhost: str) -> str | None:
        """Count a connection of `worker` unless it would go over a limit; the refusal if so."""
        refusal = self.refusal(user, vhost)
        if refusal is None:
            self.opened(worker, user, vhost)
        return refusal

    def opened(self, worker: int, user: str, vhost: str) -> None:
        """Count a connection of `worker` that was let in."""
        self._by_worker.setdefault(worker, Counter())[(user, vhost)] += 1
        self.by_user[user] += 1
        self.by_vhost[vhost] += 1

    def ended(self, worker: int, user: str, vhost: str) -> None:
        """A connection of `worker` is over (one it does not hold here counts for nothing: it
        was let in while the workers counted apart, or before this count started)."""
        held = self._by_worker.get(worker)
        if held is None or not held[(user, vhost)]:
            return
        _take(held, (user, vhost), 1)
        if not held:
            del self._by_worker[worker]
        _take(self.by_user, user, 1)
        _take(self.by_vhost, vhost, 1)

    def held_by(self, worker: int) -> Counter[Pair]:
        """The connections of `worker`, by user and virtual host (a copy)."""
        return Counter(self._by_worker.get(worker, ()))

    def worker_ended(self, worker: int) -> None:
        """Worker `worker` ended: its connections ended with it."""
        for (user, vhost), count in self._by_worker.pop(worker, Counter()).items():
            _take(self.by_user, user, count)
            _take(self.by_vhost, vhost, count)

    def replace(self, worker: int, held: Counter[Pair]) -> None:
        """Worker `worker` holds `held` (what it gave after this count started afresh, or
        after it counted apart): these replace what was counted for it."""
        self.worker_ended(worker)
        for (user, vhost), count in held.items():
            if count > 0:
                self._by_worker.setdefault(worker, Counter())[(user, vhost)] = count
                self.by_user[user] += count
                self.by_vhost[vhost] += count


def _take(counts: Counter[_K], key: _K, count: int) -> None:
    """Take `count` from `counts[key]`, forgetting keys with none left."""
    left = counts[key] - count
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)


class ConnectionAdmission(Protocol):
    def admit(self, user: str, vhost: str, then: Callable[[str | None], None]) -> None:
        """Call `then` with None when a connection of `user` to `vhost` is let in (and counted
        until `ended`), or with the refusal that names the limit reached."""

    def ended(self, user: str, vhost: str) -> None:
        """A connection let in is over."""


class LocalAdmission:
    """The count kept in this process: each call answers at once."""

    def __init__(self, count: ConnectionCount, worker: int = 0) -> None:
        self.count = count
        self.worker = worker

    def admit(self, user: str, vhost: str, then: Callable[[str | None], None]) -> None:
        then(self.count.admit(self.worker, user, vhost))

    def ended(self, user: str, vhost: str) -> None:
        self.count.ended(self.worker, user, vhost)
