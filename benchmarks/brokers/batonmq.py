"""BatonMQ: `python -m batonmq` with a configuration file in a temporary directory, from this
source tree or from a build of another (an older commit's worktree, to measure an optimisation)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.brokerproc import log_problems
from tests.ports import free_port

from benchmarks.brokers.base import HOST, Broker, wait_for_amqp
from benchmarks.brokers.postgres import DATABASE, BenchPostgres
from benchmarks.procstats import process_tree
from benchmarks.workloads import HTTP_SUFFIX, target_name


def _toml_string(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid TOML basic string


@dataclass(frozen=True, slots=True)
class Build:
    """Another BatonMQ source tree, run beside this one: `root` holds its `src/batonmq`."""

    name: str
    root: Path

    def commit(self) -> str | None:
        """The commit checked out at `root`, if it is a git work tree."""
        finished = subprocess.run(
            ["git", "-C", str(self.root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        )
        return finished.stdout.strip() if finished.returncode == 0 else None


class BatonMQ(Broker):
    """BatonMQ with the SQLite store (`postgres` None) or the PostgreSQL one, in a database of
    its own. With PostgreSQL, the server's processes are measured with the broker's: they do the
    store's work. With a `build`, the broker runs that source tree's code."""

    def __init__(
        self,
        postgres: BenchPostgres | None = None,
        build: Build | None = None,
        *,
        management: bool = False,
        database: str | None = None,
        settings: Sequence[str] = (),
        name: str | None = None,
        label: str | None = None,
        workers: int = 1,
        spread_vhosts: Sequence[str] = (),
        prepare: Callable[[Path], None] | None = None,
    ) -> None:
        """`management`: with the management HTTP API on `management_port` (else off), named
        with HTTP_SUFFIX. `database`: the PostgreSQL database, shared by the brokers that name
        it (the members of an HA cluster); else one of its own. `settings`: TOML lines added to
        its configuration (the `[cluster]` sections of an HA member). `name` and `label`: else
        from its store, build and management. `workers` and `spread_vhosts`: its `[broker]`
        settings of those names. `prepare`: run with the configuration file's path before the
        broker starts (`batonctl` on the stopped store)."""
        self.postgres = postgres
        self.build = build
        self.management_port = free_port() if management else None
        self.database = database
        self.settings = tuple(settings)
        self.workers = workers
        self.spread_vhosts = tuple(spread_vhosts)
        self.prepare = prepare
        store = "batonmq-pg" if postgres else "batonmq"
        described = "postgres" if postgres else "sqlite"
        self.name = name or target_name(store, build.name if build else None)
        if management:
            self.name += HTTP_SUFFIX
            described += ", HTTP on"
        self.label = label or f"BatonMQ ({described})"
        if build and label is None:
            self.label += f" @{build.name}"
        self.directory: Path | None = None

    def _knows(self, key: str) -> bool:
        """Whether the code this broker runs has the setting `key` (an older build may not)."""
        environment = dict(os.environ)
        if self.build:
            environment["PYTHONPATH"] = str(self.build.root / "src")
        probe = f"from batonmq.config import SETTINGS; print({key!r} in SETTINGS)"
        finished = subprocess.run(
            [sys.executable, "-c", probe],
            capture_output=True,
            text=True,
            env=environment,
            check=True,
        )
        return finished.stdout.strip() == "True"

    def start(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix=f"batonmq-bench-{self.name}-"))
        self.port = free_port()
        store = "postgres" if self.postgres else "sqlite"
        config = [
            "[broker]",
            f"data_dir = {_toml_string(str(self.directory / 'data'))}",
            *([f"workers = {self.workers}"] if self.workers > 1 else []),
            *([f"spread_vhosts = {json.dumps(self.spread_vhosts)}"] if self.spread_vhosts else []),
            "[listeners.amqp]",
            f'bind = "{HOST}"',
            f"port = {self.port}",
            "[persist]",
            f'store = "{store}"',
            "[log]",
            'level = "warning"',
        ]
        if self.management_port is not None:
            config += ["[listeners.http]", f'bind = "{HOST}"', f"port = {self.management_port}"]
        elif self._knows("listeners.http.enabled"):
            # Brokers run side by side: none takes the management port (15672).
            config += ["[listeners.http]", "enabled = false"]
        if self.postgres:
            database = self.database or (
                DATABASE
                + (f"_{self.build.name}" if self.build else "")
                + ("_http" if self.management_port is not None else "")
                + (f"_w{self.workers}" if self.workers > 1 else "")
            )
            dsn = self.postgres.create_database(database, exist_ok=self.database is not None)
            config += ["[persist.postgres]", f"dsn = {_toml_string(dsn)}"]
        config += self.settings
        config_path = self.directory / "batonmq.toml"
        config_path.write_text("\n".join(config) + "\n")
        if self.prepare is not None:
            self.prepare(config_path)
        log_path = self.directory / "broker.log"
        environment = {
            key: value for key, value in os.environ.items() if not key.startswith("BATONMQ")
        }
        environment["PYTHONUNBUFFERED"] = "1"
        if self.build:
            environment["PYTHONPATH"] = str(self.build.root / "src")
        with log_path.open("ab") as log_file:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "batonmq", "--config", str(config_path)],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=environment,
                start_new_session=True,  # a Ctrl-C to the harness does not reach it first
            )
        wait_for_amqp(self.port, self.process, log_path, timeout=30.0)

    def data_paths(self) -> list[Path]:
        paths = [self.directory / "data"] if self.directory else []
        if self.postgres is not None:
            paths.append(Path(self.postgres.server.data_dir))
        return paths

    def measured_pids(self) -> list[int]:
        return super().measured_pids() + self.store_pids()

    def store_pids(self) -> list[int]:
        if self.postgres is None:
            return []
        return process_tree(self.postgres.postmaster_pid())

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        if self.directory is not None:
            log_path = self.directory / "broker.log"
            # None when the broker could not be started (its database, say).
            log = log_path.read_text(errors="replace") if log_path.exists() else ""
            self.log_problems = tuple(log_problems(log))
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None
