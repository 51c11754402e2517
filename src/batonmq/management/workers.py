"""The broker's workers as the HTTP API sees them: one broker, whichever worker a request
reaches (`broker.workers` above 1; with one worker, everything here is local).

Every worker serves the API on the listening socket the supervisor bound. A request reaches one
of them, which answers it with its siblings' help over the link between workers
(`batonmq.server.siblings`), through the engine's public API in each:

- A request about one virtual host (its path names `{vhost}`: a queue, an exchange, bindings,
  messages, the virtual host itself) is carried out by the worker that owns the virtual host
  (`batonmq.server.placement`), which holds everything in it: the request is forwarded there
  whole (`Forwarded`), and its answer comes back as the owner wrote it. So a write is made, and
  refused, exactly as by a broker of one process. A request about one queue of a virtual host
  spread over the workers goes to the queue's owner (`carrier`), which runs it and holds the
  virtual host's whole topology; any other about a spread one goes to its home.
- A read over the whole broker (every queue, connection, channel; the overview; the metrics)
  asks every worker for what it holds (`gather`, with one of the reads of
  `batonmq.management.perworker`) and merges the answers (`batonmq.management.merge`). The reads go
  to the workers as they are now: a queue declared over AMQP a moment ago is in the answer.
- A connection is closed by the worker that holds it.
- Each worker's links with its siblings (`batonmq.cluster.peerlink`) are read in each
  (`gather_links`), for /api/nodes.
- Users, permissions and virtual hosts are written to the store the workers share by whichever
  worker takes the request; each sibling reads the catalogue again (`CatchUp`) before the
  answer goes out, so that the next request, whichever worker it reaches, finds the change.

A worker that is down (killed, restarting) or does not answer within the time limit is left out
of a gathered read, which names it (`Gathered.down`: the API says so in a header and in
/api/nodes); a request forwarded to it is a 503.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Concatenate, Final, Generic, ParamSpec, TypeVar

from batonmq.cluster.peerlink import PeerLinkState
from batonmq.engine.api import ApiError, EngineApi
from batonmq.engine.snapshots import UserInfo
from batonmq.management import problems
from batonmq.management.perworker import ASKABLE, Ownership
from batonmq.server.placement import owner_of, queue_owner
from batonmq.server.siblings import SiblingFailed, SiblingLink, SiblingUnavailable

_T = TypeVar("_T")
_P = ParamSpec("_P")

#: Seconds a worker waits for a sibling's answer to a read...
READ_TIMEOUT: Final = 5.0
#: ...and to a forwarded request that may change something (it waits for the store's commit).
WRITE_TIMEOUT: Final = 30.0

_JSON: Final = {"Content-Type": "application/json; charset=utf-8"}
_NOT_SERVING: Final = problems.HttpProblem(
    503, "service_unavailable", "the worker that owns the virtual host is starting"
)


def _spreads_none(_vhost: str) -> bool:
    return False


# What goes over the link -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CallRequest:
    """An HTTP request as a route handler reads it: what a forwarded request carries."""

    method: str
    raw_path: str
    match_info: dict[str, str]
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True, slots=True)
class Forwarded:
    """A request for another worker to carry out: the route (its index in the route table, the
    same in every worker), the request, and who made it (authenticated already)."""

    route: int
    request: CallRequest
    caller: UserInfo


@dataclass(frozen=True, slots=True)
class Answer:
    """An HTTP answer as the worker that carried the request out wrote it."""

    status: int
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True, slots=True)
class _Read:
    name: str
    args: tuple[object, ...]
    kwargs: dict[str, object]


@dataclass(frozen=True, slots=True)
class _CatchUp:
    """Read the catalogue again, and answer once it is applied."""


@dataclass(frozen=True, slots=True)
class _LinkStates:
    """The worker's links with its siblings that are up."""


@dataclass(frozen=True, slots=True)
class _Refused:
    """The engine's ApiError, as it crosses the link."""

    reply_code: int
    text: str


@dataclass(frozen=True, slots=True)
class Gathered(Generic[_T]):
    """Every worker's answer to a read, by worker index; `down`: those that gave none."""

    answers: dict[int, _T]
    down: tuple[int, ...] = ()


class Workers:
    """This worker and its siblings (see the module docstring)."""

    def __init__(
        self,
        api: EngineApi,
        index: int = 0,
        count: int = 1,
        catch_up: Callable[[], Awaitable[None]] | None = None,
        spreads: Callable[[str], bool] | None = None,
    ) -> None:
        """`catch_up`: read the catalogue from the store and apply it (with workers);
        `spreads`: whether a virtual host is spread over the workers (none by default)."""
        self.api = api
        self.index = index
        self.count = count
        self.spreads = spreads or _spreads_none
        self.ownership = Ownership(self.owns, self.holds_queues)
        self._catch_up = catch_up
        #: The link to the siblings (set once it is made: it answers with `serve`).
        self.link: SiblingLink | None = None
        #: Carries out a request forwarded here (the HTTP listener sets it once it runs).
        self.carry_out: Callable[[Forwarded], Awaitable[Answer]] | None = None
        #: This worker's links with its siblings that are up (`PeerLinks.describe`, with
        #: workers): none with one process.
        self.link_states: Callable[[], list[PeerLinkState]] = list

    def owner(self, vhost: str) -> int:
        return owner_of(vhost, self.count)

    def owns(self, vhost: str) -> bool:
        return self.owner(vhost) == self.index

    def holds_queues(self, vhost: str) -> bool:
        """Whether the queues this worker runs of `vhost` are its to list."""
        return self.owns(vhost) or self.spreads(vhost)

    def carrier(self, vhost: str, queue: str | None) -> int:
        """The worker that carries out a request about `vhost`, or about its queue `queue`:
        the queue's owner in a spread virtual host (it runs the queue, and holds the whole
        topology), else the virtual host's owner (its home, when it is spread)."""
        if queue is not None and self.spreads(vhost):
            return queue_owner(vhost, queue, self.count)
        return self.owner(vhost)

    async def gather(
        self,
        read: Callable[Concatenate[EngineApi, Ownership, _P], _T],
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> Gathered[_T]:
        """`read` (one of this module's reads) in every worker."""
        here = read(self.api, self.ownership, *args, **kwargs)
        return await self._gather(here, _Read(read.__name__, args, kwargs))

    async def gather_links(self) -> Gathered[list[PeerLinkState]]:
        """Every worker's links with its siblings that are up."""
        return await self._gather(self.link_states(), _LinkStates())

    async def _gather(self, here: _T, question: object) -> Gathered[_T]:
        """`here`, this worker's answer to `question`, and every sibling's."""
        answers = {self.index: here}
        if self.link is None or self.count == 1:
            return Gathered(answers)
        siblings = [worker for worker in range(self.count) if worker != self.index]
        results = await asyncio.gather(
            *(self._ask(worker, question, READ_TIMEOUT) for worker in siblings),
            return_exceptions=True,
        )
        down: list[int] = []
        for worker, result in zip(siblings, results, strict=True):
            if isinstance(result, (SiblingUnavailable, SiblingFailed)):
                down.append(worker)
            elif isinstance(result, BaseException):
                raise result
            else:
                answers[worker] = result  # type: ignore[assignment]  # what `question` asks
        return Gathered(dict(sorted(answers.items())), tuple(down))

    async def on(
        self,
        worker: int,
        work: Callable[Concatenate[EngineApi, Ownership, _P], _T],
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> _T:
        """`work` (one of this module's) in `worker`; a 503 when it does not answer."""
        if worker == self.index:
            return work(self.api, self.ownership, *args, **kwargs)
        try:
            answer = await self._ask(worker, _Read(work.__name__, args, kwargs), WRITE_TIMEOUT)
        except (SiblingUnavailable, SiblingFailed) as error:
            raise problems.HttpProblem(503, "service_unavailable", str(error)) from None
        return answer  # type: ignore[return-value]  # what `work` returned there

    async def on_async(
        self,
        worker: int,
        work: Callable[Concatenate[EngineApi, Ownership, _P], Awaitable[_T]],
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> _T:
        """`work` (one of this module's coroutine functions) in `worker`; a 503 when it does
        not answer."""
        if worker == self.index:
            return await work(self.api, self.ownership, *args, **kwargs)
        try:
            answer = await self._ask(worker, _Read(work.__name__, args, kwargs), WRITE_TIMEOUT)
        except (SiblingUnavailable, SiblingFailed) as error:
            raise problems.HttpProblem(503, "service_unavailable", str(error)) from None
        return answer  # type: ignore[return-value]  # what `work` returned there

    async def forward(self, worker: int, forwarded: Forwarded) -> Answer:
        """Have `worker` carry out `forwarded`; a 503 when it does not answer."""
        timeout = READ_TIMEOUT if forwarded.request.method == "GET" else WRITE_TIMEOUT
        try:
            answer = await self._ask(worker, forwarded, timeout)
        except (SiblingUnavailable, SiblingFailed) as error:
            raise problems.HttpProblem(503, "service_unavailable", str(error)) from None
        assert isinstance(answer, Answer)
        return answer

    async def on_siblings(
        self,
        work: Callable[Concatenate[EngineApi, Ownership, _P], object],
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> None:
        """`work` (one of this module's) in every sibling, with no answer: one that is down
        does without (a sibling starting again quiesced, or adopting what it missed, is its
        own business)."""
        if self.link is None:
            return
        question = _Read(work.__name__, args, kwargs)
        await asyncio.gather(
            *(
                self._ask(worker, question, WRITE_TIMEOUT)
                for worker in range(self.count)
                if worker != self.index
            ),
            return_exceptions=True,
        )

    async def catch_up_siblings(self) -> None:
        """Have every sibling read the catalogue again and wait until they have (those that do
        not answer read it when they start again, or at their next reading of its version)."""
        if self.link is None:
            return
        await asyncio.gather(
            *(
                self._ask(worker, _CatchUp(), WRITE_TIMEOUT)
                for worker in range(self.count)
                if worker != self.index
            ),
            return_exceptions=True,
        )

    async def _ask(self, worker: int, question: object, timeout: float) -> object:
        assert self.link is not None
        answer = await self.link.request(worker, question, timeout)
        if isinstance(answer, _Refused):
            raise ApiError(answer.reply_code, answer.text)
        return answer

    async def serve(self, question: object) -> object:
        """A sibling's question, answered (the link's `serve`)."""
        try:
            if isinstance(question, _Read):
                work = ASKABLE[question.name]
                done = work(self.api, self.ownership, *question.args, **question.kwargs)
                return await done if inspect.isawaitable(done) else done
            if isinstance(question, Forwarded):
                if self.carry_out is None:  # starting: its HTTP listener is not up yet
                    return Answer(503, _JSON, json.dumps(_NOT_SERVING.body()).encode())
                return await self.carry_out(question)
            if isinstance(question, _LinkStates):
                return self.link_states()
            if isinstance(question, _CatchUp):
                if self._catch_up is not None:
                    await self._catch_up()
                return None
        except ApiError as error:
            return _Refused(error.reply_code, error.text)
        raise TypeError(f"not a question: {type(question).__name__}")
