"""Start and stop a real BatonMQ broker process on a free loopback port, for tests."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel

from batonmq.queues.streams.storage import stream_directory
from batonmq.server.placement import owner_of
from batonmq.store.placement import streams_root
from tests.ports import free_port


@dataclass
class RunningBroker:
    """A broker the tests can reach; `process` is None for an external broker (--amqp-url)."""

    host: str
    port: int
    vhost: str = "/"
    username: str = "guest"
    password: str = "guest"
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    data_dir: Path | None = None
    extra_args: tuple[str, ...] = field(default=())
    environment: dict[str, str] = field(default_factory=dict)
    #: The amqps listener's port, when start_broker was asked for one.
    amqps_port: int | None = None
    #: The management HTTP API's port, when start_broker was asked for it.
    http_port: int | None = None
    #: The log as it was when this process ended by stop() or kill(): a test may remove the
    #: log's directory (unmount a small disk) before the harness reads the log.
    final_log: str | None = None
    #: How many worker processes serve (`broker.workers`; 1: one process).
    workers: int = 1

    @property
    def url(self) -> str:
        vhost = "%2F" if self.vhost == "/" else self.vhost
        return f"amqp://{self.username}:{self.password}@{self.host}:{self.port}/{vhost}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""

    def signal(self, signum: int) -> None:
        assert self.process is not None, "an external broker cannot be signalled"
        self.process.send_signal(signum)

    def wait(self, timeout: float = 10.0) -> int:
        assert self.process is not None
        return self.process.wait(timeout)

    def kill(self) -> None:
        """SIGKILL of the `batonmq` process: the broker gets no chance to write anything more.
        With workers, the kernel ends each with it (the supervisor's parent-death signal);
        returns once every process of the broker has ended, so that none still holds the
        store's lock or its lease when the test goes on."""
        assert self.process is not None
        if self.process.poll() is None:  # not ended yet (by kill(), or by itself)
            workers = self.pids()[1:]
            self.process.kill()
            self.process.wait(10)
            for pid in workers:
                wait_until(functools.partial(process_gone, pid), f"worker pid {pid} to end", 10)
        self.final_log = self.log()

    def pids(self) -> list[int]:
        """The broker's processes: the `batonmq` process, then (with workers) each worker it
        runs now."""
        assert self.process is not None, "an external broker's processes are not ours"
        pid = self.process.pid
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except FileNotFoundError:  # it has ended
            children = []
        return [pid, *map(int, children)]

    def pause(self) -> None:
        """SIGSTOP the whole broker, as a machine that stops answering: the `batonmq` process
        first (so that it starts no worker meanwhile), then every worker. Pausing the
        supervisor alone would leave the workers serving."""
        self._signal_every_process(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT every process of a broker that `pause` paused."""
        self._signal_every_process(signal.SIGCONT)

    def _signal_every_process(self, signum: int) -> None:
        """`signum` to the `batonmq` process, then to each worker it has once it got it."""
        assert self.process is not None, "an external broker cannot be signalled"
        self.process.send_signal(signum)
        for pid in self.pids()[1:]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def __enter__(self) -> RunningBroker:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self.final_log = self.log()

    def stream_directory(self, queue: str, vhost: str = "/") -> Path:
        """Where the segment files of stream `queue` of `vhost` are: under the streams root of
        the worker that owns `vhost` (of the one process, with one)."""
        assert self.data_dir is not None, "an external broker's files are not ours to read"
        worker = None if self.workers == 1 else owner_of(vhost, self.workers)
        return stream_directory(streams_root(self.data_dir, worker), vhost, queue)

    def last_log(self) -> str:
        """The log file as it is now, or as it was when the process ended if the file is gone."""
        if self.log_path is not None and self.log_path.exists():
            return self.log()
        return self.final_log or ""


#: The brokers start_broker started since the last take_started_brokers(): the test harness
#: (tests/conftest.py) takes them when a test ends, stops them and checks their logs.
_started: list[RunningBroker] = []


def take_started_brokers() -> list[RunningBroker]:
    """The brokers started since the last call, in order; the list starts afresh."""
    taken = list(_started)
    _started.clear()
    return taken


# A record at level error or critical, in the text format ("<ts> error <logger> msg=...") or
# the JSON one (batonmq.log).
_ERROR_RECORD = re.compile(r'^\S+ (?:error|critical) |^\{.*"level": "(?:error|critical)"')
# A traceback that Python wrote to stderr itself (not through logging, which keeps a traceback
# on its record's one line): it runs on to the next log record.
_RAW_TRACEBACK = re.compile(r"^Traceback \(most recent call last\):")
_LOG_RECORD = re.compile(r"^(?:\d{4}-\d\d-\d\dT|\{)")


def log_problems(log: str, expected: Iterable[str] = ()) -> list[str]:
    """The entries of a broker log that show something went wrong: every record at level error
    or critical, and every line that holds a traceback (a traceback Python printed without
    logging is one entry with its following lines). An entry that one of the `expected`
    regular expressions matches (re.search) is not a problem: a test declares the errors it
    provokes on purpose."""
    allowed = [re.compile(pattern) for pattern in expected]
    entries: list[str] = []
    lines = log.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if _RAW_TRACEBACK.match(line):
            block = [line]
            while index < len(lines) and not _LOG_RECORD.match(lines[index]):
                block.append(lines[index])
                index += 1
            entries.append("\n".join(block))
        elif "Traceback" in line or _ERROR_RECORD.match(line):
            entries.append(line)
    return [entry for entry in entries if not any(p.search(entry) for p in allowed)]


def wait_for_port(
    host: str,
    port: int,
    process: subprocess.Popen[bytes] | None,
    log_path: Path,
    timeout: float = 15.0,
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(
                f"broker exited with {process.returncode}:\n{log_path.read_text(errors='replace')}"
            )
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"broker did not listen on {host}:{port} within {timeout}s")


def start_broker(
    workdir: Path,
    *extra_args: str,
    environment: dict[str, str] | None = None,
    amqps: bool = False,
    plain: bool = True,
    http: bool = False,
) -> RunningBroker:
    """Run `python -m batonmq` on a free port with its data and log under `workdir` (started
    again with the same `workdir`, it finds its data again); `environment` adds variables
    (configuration keys as BATONMQ__SECTION__KEY).

    `amqps` also enables the TLS listener on 127.0.0.1 and a free port of its own (`amqps_port`;
    `environment` gives its certificate settings); `plain=False` disables the plain listener
    (sslOnly), whose port is still chosen and passed, so that a test can show nothing listens
    there. The management HTTP API is off unless `http`, which puts it on 127.0.0.1 and a free
    port of its own (`http_port`): parallel brokers never meet on 15672. The broker is ready
    once every enabled listener accepts connections."""
    port = free_port()
    data_dir = workdir / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "broker.log"
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    amqps_port = free_port() if amqps else None
    if amqps_port is not None:
        env["BATONMQ__LISTENERS__AMQPS__ENABLED"] = "true"
        env["BATONMQ__LISTENERS__AMQPS__BIND"] = "127.0.0.1"
        env["BATONMQ__LISTENERS__AMQPS__PORT"] = str(amqps_port)
    if not plain:
        env["BATONMQ__LISTENERS__AMQP__ENABLED"] = "false"
    http_port = free_port() if http else None
    env.update(http_environment(http_port))
    env.update(environment or {})
    with log_path.open("ab") as log_file:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "batonmq",
                "--bind",
                "127.0.0.1",
                "--port",
                str(port),
                "--data-dir",
                str(data_dir),
                "--log-level",
                "debug",
                *extra_args,
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
        )
    broker = RunningBroker(
        "127.0.0.1",
        port,
        process=process,
        log_path=log_path,
        data_dir=data_dir,
        extra_args=extra_args,
        environment=dict(environment or {}),
        amqps_port=amqps_port,
        http_port=http_port,
        workers=int(env.get("BATONMQ__BROKER__WORKERS", "1")),
    )
    _started.append(broker)
    try:
        if plain:
            wait_for_port("127.0.0.1", port, process, log_path)
        if amqps_port is not None:
            wait_for_port("127.0.0.1", amqps_port, process, log_path)
        if http_port is not None:
            wait_for_port("127.0.0.1", http_port, process, log_path)
        if broker.workers > 1:
            # The supervisor bound the ports before it started the workers: wait for them all.
            wait_until(lambda: _started_line(broker.log()), "every worker to serve")
    except Exception:
        broker.stop()
        raise
    return broker


def _started_line(log: str) -> bool:
    """Whether `log` has the "broker started" line, in the text format or in JSON."""
    return 'msg="broker started"' in log or '"msg": "broker started"' in log


def http_environment(port: int | None) -> dict[str, str]:
    """The configuration variables of a test broker's management API: on 127.0.0.1 and
    `port`, or off (None)."""
    if port is None:
        return {"BATONMQ__LISTENERS__HTTP__ENABLED": "false"}
    return {
        "BATONMQ__LISTENERS__HTTP__ENABLED": "true",
        "BATONMQ__LISTENERS__HTTP__BIND": "127.0.0.1",
        "BATONMQ__LISTENERS__HTTP__PORT": str(port),
    }


class BrokerLife:
    """One broker's data across several processes: start, stop or kill, start again."""

    def __init__(self, workdir: Path, environment: dict[str, str], *extra_args: str) -> None:
        self.workdir = workdir
        self.environment = environment
        self.extra_args = extra_args
        self.current = start_broker(workdir, *extra_args, environment=environment)

    def restart(self, *, kill: bool) -> RunningBroker:
        """End the current process (SIGKILL if `kill`, else a clean SIGTERM shutdown) and start
        a new one (on a new port) on the same data."""
        if kill:
            self.current.kill()
        else:
            self.current.stop()
        self.current = start_broker(self.workdir, *self.extra_args, environment=self.environment)
        return self.current

    def stop(self) -> None:
        self.current.stop()


def external_broker(url: str) -> RunningBroker:
    parts = urlsplit(url)
    vhost = parts.path[1:].replace("%2F", "/") if len(parts.path) > 1 else "/"
    return RunningBroker(
        parts.hostname or "127.0.0.1",
        parts.port or 5672,
        vhost=vhost,
        username=parts.username or "guest",
        password=parts.password or "guest",
    )


def run_batonctl(
    workdir: Path, *args: str, environment: dict[str, str] | None = None, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    """`batonctl --data-dir WORKDIR/data ARGS` (the data of `start_broker(workdir)`), as an
    operator runs it; `environment` adds configuration variables."""
    return subprocess.run(
        [sys.executable, "-m", "batonmq.cli.ctl", "--data-dir", str(workdir / "data"), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, **(environment or {})},
        check=False,
        timeout=60,
    )


def failed_start(workdir: Path, environment: dict[str, str]) -> str:
    """Run `python -m batonmq` with `environment`, which must make it refuse to start: exit
    status 1 within 30 s. Its output."""
    finished = subprocess.run(
        [
            sys.executable,
            "-m",
            "batonmq",
            "--bind",
            "127.0.0.1",
            "--port",
            str(free_port()),
            "--data-dir",
            str(workdir / "data"),
        ],
        env={**os.environ, "PYTHONUNBUFFERED": "1", **http_environment(None), **environment},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=30,
        check=False,
    )
    output = finished.stdout.decode(errors="replace")
    assert finished.returncode == 1, output
    return output


def vhost_of_each_worker(workers: int) -> dict[int, str]:
    """A virtual host owned by each of `workers` workers, by index ("/" is one of them)."""
    candidates = ["/", *(f"tenant{n}" for n in range(20 * workers))]
    return {
        owner: next(name for name in candidates if owner_of(name, workers) == owner)
        for owner in range(workers)
    }


def worker_pids(log: str) -> dict[int, int]:
    """The latest pid of each worker of a broker with several, from its "worker started"
    lines in `log`."""
    pids: dict[int, int] = {}
    for line in log.splitlines():
        if 'msg="worker started"' in line:
            worker = re.search(r"\bworker=(\d+)", line)
            pid = re.search(r"\bpid=(\d+)", line)
            assert worker is not None and pid is not None, line
            pids[int(worker.group(1))] = int(pid.group(1))
    return pids


def process_gone(pid: int) -> bool:
    """Whether process `pid` has ended: no such process, or a zombie that nobody reaped yet
    (its files, locks and sockets are closed)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Poll `condition` until it holds; an AssertionError naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@contextlib.contextmanager
def confirming_channel(broker: RunningBroker) -> Iterator[BlockingChannel]:
    """A pika channel in confirm mode on a connection of its own, closed afterwards (quietly:
    the test may have killed the broker)."""
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        yield channel
    finally:
        with contextlib.suppress(pika.exceptions.AMQPError):
            connection.close()


def connect(
    broker: RunningBroker, user: str = "guest", password: str = "guest", vhost: str = "/"
) -> pika.BlockingConnection:
    """A pika connection to `broker` as `user`, one attempt only (a refusal is the answer)."""
    return pika.BlockingConnection(
        pika.ConnectionParameters(
            broker.host,
            broker.port,
            vhost,
            pika.PlainCredentials(user, password),
            connection_attempts=1,
        )
    )


def connection_on(
    broker: RunningBroker, worker: int, vhost: str = "/", attempts: int = 60
) -> pika.BlockingConnection:
    """A pika connection to `broker` that worker `worker` serves: a connection to a virtual host
    spread over the workers stays in the worker that accepted it, whichever the kernel chose,
    so connections are opened until the "connection opened" line of `worker` names this
    client's port (the others are closed)."""
    for _ in range(attempts):
        before = len(broker.log())  # a line of an earlier connection from that port is not it
        connection = connect(broker, vhost=vhost)
        port = connection._impl._transport._sock.getsockname()[1]
        served_by: list[int] = []

        def opened(
            port: int = port, served_by: list[int] = served_by, before: int = before
        ) -> bool:
            for line in broker.log()[before:].splitlines():
                if "connection opened" in line and f"peer=127.0.0.1:{port} " in f"{line} ":
                    found = re.search(r"\bworker=(\d+)", line)
                    assert found is not None, line
                    served_by.append(int(found.group(1)))
                    return True
            return False

        wait_until(opened, f"the log line of the connection from port {port}", timeout=10)
        if served_by[0] == worker:
            return connection
        connection.close()
    raise AssertionError(f"no connection landed on worker {worker} in {attempts} attempts")
