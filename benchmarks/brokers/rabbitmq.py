"""RabbitMQ for the comparison: one already running (`RunningRabbitMQ`, --rabbitmq-url), or
Debian's package run as a node of its own (`RabbitMQ`): free AMQP and distribution ports, a
node name of its own, and every file (database, logs, configuration, plugins list, Erlang cookie)
in a temporary directory, so that it cannot clash with a RabbitMQ already on the machine.

Debian's /usr/sbin/rabbitmq-server switches to the rabbitmq user and drops the environment, so
the harness runs the script it wraps (/usr/lib/rabbitmq/bin/rabbitmq-server) directly, with HOME
set to the temporary directory where the Erlang cookie is. Defaults are RabbitMQ's, except that
no plugin is enabled (but management, when asked for) and the log is quiet. Missing, the package
is installed with apt-get (as root).
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.ports import free_port

from benchmarks.brokers.base import HOST, Broker, BrokerError, probe, wait_for_amqp
from benchmarks.loadgen.client import BrokerClosed, Endpoint
from benchmarks.procstats import listening_pids, process_tree

EPMD_PORT = 4369
_CONFIG = """\
log.console = false
log.file.level = warning
"""


def rabbitmq_scripts() -> Path | None:
    """The directory holding the real rabbitmq-server and rabbitmqctl scripts."""
    candidates = ["/usr/lib/rabbitmq/bin"]
    candidates += sorted(glob.glob("/usr/lib/rabbitmq/lib/rabbitmq_server-*/sbin"), reverse=True)
    for directory in candidates:
        if Path(directory, "rabbitmq-server").exists():
            return Path(directory)
    found = shutil.which("rabbitmq-server")
    return Path(found).parent if found else None


def install_rabbitmq() -> Path:
    """apt-get install rabbitmq-server (as root), then where its scripts are."""
    if os.geteuid() != 0:
        raise BrokerError("rabbitmq-server is not installed, and installing it needs root")
    print("rabbitmq-server is not installed: apt-get install rabbitmq-server", file=sys.stderr)
    environment = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", "rabbitmq-server"]):
        finished = subprocess.run(command, env=environment, capture_output=True, check=False)
        if finished.returncode != 0:
            raise BrokerError(f"{' '.join(command)} failed:\n{finished.stderr.decode()[-2000:]}")
    scripts = rabbitmq_scripts()
    if scripts is None:
        raise BrokerError("rabbitmq-server was installed but its scripts were not found")
    return scripts


def rabbitmq_version(scripts: Path) -> str:
    versions = glob.glob("/usr/lib/rabbitmq/lib/rabbitmq_server-*")
    if versions:
        return sorted(versions)[-1].rsplit("-", 1)[1]
    return scripts.resolve().parent.name.rsplit("-", 1)[-1]


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex((HOST, port)) == 0


class RabbitMQ(Broker):
    name = "rabbitmq"

    def __init__(self, *, management: bool = False) -> None:
        """`management`: with the management plugin, on `management_port` (to record its
        answers: benchmarks/record_management.py)."""
        self.scripts = rabbitmq_scripts()
        self.label = "RabbitMQ"
        self.management_port = free_port() if management else None
        #: Its Prometheus plugin's port, beside management (RabbitMQ serves /metrics there).
        self.prometheus_port = free_port() if management else None
        self.directory: Path | None = None
        self.node = f"bench{os.getpid()}@localhost"
        self._started_epmd = False
        self._environment_cache: dict[str, str] = {}

    def _environment(self, directory: Path, dist_port: int) -> dict[str, str]:
        environment = dict(os.environ)
        environment.update(
            HOME=str(directory),
            RABBITMQ_NODENAME=self.node,
            RABBITMQ_NODE_IP_ADDRESS=HOST,
            RABBITMQ_NODE_PORT=str(self.port),
            RABBITMQ_DIST_PORT=str(dist_port),
            RABBITMQ_MNESIA_BASE=str(directory / "mnesia"),
            RABBITMQ_LOG_BASE=str(directory / "log"),
            RABBITMQ_CONFIG_FILE=str(directory / "rabbitmq.conf"),
            RABBITMQ_ADVANCED_CONFIG_FILE=str(directory / "advanced.config"),
            RABBITMQ_CONF_ENV_FILE=str(directory / "rabbitmq-env.conf"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(directory / "enabled_plugins"),
            RABBITMQ_PID_FILE=str(directory / "rabbitmq.pid"),
        )
        return environment

    def start(self) -> None:
        if self.scripts is None:
            self.scripts = install_rabbitmq()
        self.label = f"RabbitMQ {rabbitmq_version(self.scripts)}"
        directory = self.directory = Path(tempfile.mkdtemp(prefix="batonmq-bench-rabbitmq-"))
        self.port = free_port()
        dist_port = free_port()
        config, plugins = _CONFIG, ""
        if self.management_port is not None:
            config += f"management.tcp.ip = {HOST}\nmanagement.tcp.port = {self.management_port}\n"
            config += f"prometheus.tcp.ip = {HOST}\nprometheus.tcp.port = {self.prometheus_port}\n"
            plugins = "rabbitmq_management,rabbitmq_prometheus"
        (directory / "rabbitmq.conf").write_text(config)
        (directory / "rabbitmq-env.conf").write_text("")
        (directory / "enabled_plugins").write_text(f"[{plugins}].\n")
        cookie = directory / ".erlang.cookie"
        cookie.write_text(os.urandom(16).hex().upper())
        cookie.chmod(0o600)
        self._environment_cache = self._environment(directory, dist_port)
        self._started_epmd = not _listening(EPMD_PORT)
        log_path = directory / "startup.log"
        with log_path.open("ab") as log_file:
            self.process = subprocess.Popen(
                [str(self.scripts / "rabbitmq-server")],
                cwd=directory,
                env=self._environment_cache,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, to kill it whole if needed
            )
        try:
            wait_for_amqp(self.port, self.process, log_path, timeout=120.0)
        except BaseException:
            self.stop()
            raise

    def data_paths(self) -> list[Path]:
        return [self.directory / "mnesia"] if self.directory else []

    def stop(self) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            assert self.scripts is not None
            subprocess.run(
                [str(self.scripts / "rabbitmqctl"), "-n", self.node, "stop"],
                env=self._environment_cache,
                capture_output=True,
                timeout=120,
                check=False,
            )
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
        if self._started_epmd:
            # Stops epmd only if no node is registered with it any more (someone else's).
            subprocess.run(["epmd", "-kill"], capture_output=True, timeout=10, check=False)
            self._started_epmd = False
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None


class RunningRabbitMQ(Broker):
    """A RabbitMQ that is already running at `endpoint` (--rabbitmq-url): the harness neither
    installs, starts nor stops it. Its CPU and RSS are those of the processes found listening
    on the URL's port when the host is an address of this machine (and, unless the harness
    runs as root, they are the harness user's own); otherwise rows report no CPU and no RSS
    for it, and say why in their notes, and the memory rows fail."""

    name = "rabbitmq"

    def __init__(self, endpoint: Endpoint) -> None:
        self._endpoint = endpoint
        self.host, self.port = endpoint.host, endpoint.port
        self.label = f"RabbitMQ at {endpoint.host}:{endpoint.port}"
        self.pids: list[int] = []

    @property
    def endpoint(self) -> Endpoint:
        return self._endpoint

    def start(self) -> None:
        try:
            asyncio.run(probe(self._endpoint))
        except (OSError, BrokerClosed, TimeoutError) as error:
            raise BrokerError(
                f"no AMQP connection to {self.host}:{self.port} vhost {self._endpoint.vhost!r} "
                f"as {self._endpoint.username!r}: {error or type(error).__name__}"
            ) from error
        self.pids = listening_pids(self.host, self.port)

    def stop(self) -> None:
        """Nothing: the harness did not start it."""

    def measured_pids(self) -> list[int]:
        return sorted({pid for holder in self.pids for pid in process_tree(holder)})

    def alive(self) -> bool:
        """Whether its processes are there; true when they are unknown (a failed row says)."""
        return not self.pids or any(Path("/proc", str(pid)).exists() for pid in self.pids)
