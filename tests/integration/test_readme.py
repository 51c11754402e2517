"""Every ```toml and ```sh block of README.md, run for real. The Hardening requirements: "The
README's configuration file 'with every key at its default' does not start the broker ... Every TOML
and shell block in the README that claims to work gets a test that runs it."

A TOML block is a configuration file: the broker starts with it and serves a pika client. A
shell block is run command by command, each by the runner that `_runner` picks from its first
words; a command no runner knows fails `test_every_block_is_known`, so a new block cannot go
untested by accident. `NOT_RUN` names the blocks that are not run, each with the reason. The
placeholders the README writes for the reader to fill in (DIR, FILE, [--json], a|b) are filled
in by `_expanded`, and /tmp paths are moved under the test's own directory. A ```python block
is a Spark job, which tests/integration/test_spark.py runs on the local Spark its tests share (and
the spark-submit command here on a standalone Spark cluster of this machine), or a client of an
HA cluster, which tests/fault/test_client_failover.py runs against one.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pika
import pytest

from tests.brokerproc import (
    RunningBroker,
    free_port,
    http_environment,
    start_broker,
    wait_until,
)
from tests.httpapi import call

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BIN = Path(sys.executable).parent
PASSWORD = "s3cret-Password"

#: Blocks that are not run (their commands, as written), and why.
NOT_RUN = {
    "scripts/check": "it runs the whole test suite, this test among them; CI runs it (.ci/run)",
}


@dataclass(frozen=True)
class Block:
    language: str
    text: str
    line: int

    def commands(self) -> list[str]:
        """The block's non-empty lines, without comments."""
        lines = (re.sub(r"(^|\s)#.*", "", line).strip() for line in self.text.splitlines())
        return [line for line in lines if line]


def readme_blocks() -> list[Block]:
    text = README.read_text(encoding="utf-8")
    return [
        Block(match["language"], match["text"], text.count("\n", 0, match.start()) + 1)
        for match in re.finditer(r"^```(?P<language>\S*)\n(?P<text>.*?)^```$", text, re.M | re.S)
    ]


BLOCKS = readme_blocks()


def _blocks(language: str) -> list[object]:
    return [
        pytest.param(block, id=f"README.md:{block.line}")
        for block in BLOCKS
        if block.language == language and "\n".join(block.commands()) not in NOT_RUN
    ]


# --- what the shell blocks' commands need ---------------------------------------------------------


@dataclass
class Sandbox:
    """Where a shell block runs: its own directory, data directory and configuration."""

    directory: Path
    environment: dict[str, str] = field(default_factory=dict)
    broker: RunningBroker | None = None

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"  # where start_broker(directory) keeps its data

    def path(self, name: str) -> Path:
        return self.directory / name


def _environment(sandbox: Sandbox) -> dict[str, str]:
    """The caller's environment without BATONMQ variables, this Python's scripts first on
    PATH, and the sandbox's configuration."""
    environment = {name: value for name, value in os.environ.items() if "BATONMQ" not in name}
    environment["PATH"] = f"{BIN}{os.pathsep}{environment.get('PATH', '')}"
    environment["XDG_DATA_HOME"] = str(sandbox.path("xdg"))
    return {**environment, **sandbox.environment}


def _moved(token: str, sandbox: Sandbox) -> str:
    """A /tmp path of the README, under the sandbox instead."""
    return re.sub(r"/tmp/([\w.-]+)", lambda match: str(sandbox.path(match[1])), token)


def _password_file(sandbox: Sandbox, file_format: str) -> Path:
    """A password file of `file_format` ("plain" or "base64md5") with a user of its own."""
    user = f"imported-{file_format}"
    secret = PASSWORD
    if file_format == "base64md5":
        secret = base64.b64encode(hashlib.md5(PASSWORD.encode()).digest()).decode()
    path = sandbox.path(f"passwords.{file_format}")
    path.write_text(f"{user}:{secret}\n", encoding="utf-8")
    return path


def _expanded(tokens: list[str], sandbox: Sandbox) -> list[list[str]]:
    """The commands a README command with placeholders stands for: each alternative of a|b,
    with and without each [--option]; DIR a directory of the sandbox, FILE a password file in
    the command's --format."""
    variants: list[list[str]] = [[]]
    for token in tokens:
        if re.fullmatch(r"\[--[\w-]+\]", token):
            variants = [*variants, *([*variant, token[1:-1]] for variant in variants)]
        elif re.fullmatch(r"\w+(\|\w+)+", token):
            variants = [[*variant, choice] for variant in variants for choice in token.split("|")]
        elif token == "DIR":
            variants = [[*variant, str(sandbox.path("backup"))] for variant in variants]
        else:
            variants = [[*variant, _moved(token, sandbox)] for variant in variants]
    for variant in variants:
        if "FILE" in variant:
            file_format = variant[variant.index("--format") + 1]
            variant[variant.index("FILE")] = str(_password_file(sandbox, file_format))
    return variants


def _succeeds(
    argv: list[str], sandbox: Sandbox, cwd: Path, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        argv, input=stdin, capture_output=True, text=True, cwd=cwd, env=_environment(sandbox),
        timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"{shlex.join(argv)}:\n{done.stdout}{done.stderr}"
    assert "Traceback" not in done.stderr
    return done


def _run_batonctl(tokens: list[str], sandbox: Sandbox) -> None:
    """A batonctl command on the sandbox's data directory. A command that asks for a password
    on the terminal gets it with --password-stdin; `acl reload` needs a running broker, which
    is started for it on the same data and configuration (after the block's store commands)."""
    sandbox.environment["BATONMQ__BROKER__DATA_DIR"] = str(sandbox.data_dir)
    sandbox.environment["BATONMQ__ACL__FILE"] = str(sandbox.path("broker.acl"))
    sandbox.path("broker.acl").write_text("ACL ALLOW-LOG ALL ALL\n", encoding="utf-8")
    asks = tokens[1:3] in (["user", "add"], ["user", "passwd"]) and not any(
        token.startswith("--password") for token in tokens
    )
    if tokens[1:3] == ["acl", "reload"] and sandbox.broker is None:
        sandbox.broker = start_broker(sandbox.directory, environment=sandbox.environment)
    for argv in _expanded(tokens, sandbox):
        _succeeds(
            [*argv, "--password-stdin"] if asks else argv,
            sandbox,
            sandbox.directory,
            stdin=f"{PASSWORD}\n",
        )
    if tokens[1:3] == ["acl", "reload"]:
        broker = sandbox.broker
        assert broker is not None
        wait_until(lambda: "ACL reloaded" in broker.log(), "the broker to reload its ACL")


#: The batonctl command groups that talk to a running broker (the others work on its data).
LIVE_GROUPS = ("status", "list", "query", "pause", "resume", "purge", "delete", "close",
               "metrics", "log", "definitions")  # fmt: skip


def _run_live_batonctl(tokens: list[str], sandbox: Sandbox) -> None:
    """A batonctl command for a running broker: the block's broker, started for its first
    command with its HTTP API on a free port (which BATONCTL_URL names) and the queue `orders`
    the README's commands name, holding a message."""
    if sandbox.broker is None:
        broker = start_broker(sandbox.directory, http=True, environment=sandbox.environment)
        sandbox.broker = broker
        sandbox.environment["BATONCTL_URL"] = f"http://127.0.0.1:{broker.http_port}"
        assert call(broker, "PUT", "/api/queues/%2F/orders", {"durable": True})[0] == 201
        published = {"routing_key": "orders", "payload": "o1", "payload_encoding": "string",
                     "properties": {}}  # fmt: skip
        assert call(broker, "POST", "/api/exchanges/%2F/amq.default/publish", published) == (
            200,
            {"routed": True},
        )
    for argv in _expanded(tokens, sandbox):
        _succeeds(argv, sandbox, sandbox.directory)


def _clone(sandbox: Sandbox) -> Path:
    """A clone of this repository (with its history: HEAD~1 is named) to run git in."""
    clone = sandbox.path("clone")
    if not clone.exists():
        _succeeds(["git", "clone", "--quiet", str(ROOT), str(clone)], sandbox, sandbox.directory)
    return clone


def _run_git(tokens: list[str], sandbox: Sandbox) -> None:
    for argv in _expanded(tokens, sandbox):
        _succeeds(argv, sandbox, _clone(sandbox))


def _run_compare(tokens: list[str], sandbox: Sandbox) -> None:
    """The harness's command line as written, checked and listed (--list) rather than run: a
    full run takes minutes and is tests/integration/test_benchmark_harness.py's business."""
    for argv in _expanded(tokens, sandbox):
        done = _succeeds([sys.executable, *argv[1:], "--list"], sandbox, _clone(sandbox))
        listed = done.stdout.splitlines()
        assert listed
        assert all(line.startswith("* ") for line in listed)  # --rows headline: marked "*"


def _run_install(command: str, sandbox: Sandbox) -> None:
    """The quick start as written, in a copy of this source tree: it makes .venv, installs
    BatonMQ from the package index and runs the broker, which must then serve a pika client
    (on a free port: the README's 5672 may be taken)."""
    tree = sandbox.path("tree")
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, tracked.split("\0")):
        if (ROOT / name).is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, tree / name)
    port = free_port()
    sandbox.environment["BATONMQ__LISTENERS__AMQP__BIND"] = "127.0.0.1"
    sandbox.environment["BATONMQ__LISTENERS__AMQP__PORT"] = str(port)
    sandbox.environment.update(http_environment(free_port()))
    environment = _environment(sandbox)
    environment["PATH"] = environment["PATH"].removeprefix(f"{BIN}{os.pathsep}")
    environment.pop("VIRTUAL_ENV", None)
    log = sandbox.path("install.log")
    with log.open("wb") as output:
        process = subprocess.Popen(
            ["bash", "-c", command],
            cwd=tree, env=environment, stdout=output, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while True:
            assert process.poll() is None, log.read_text(errors="replace")
            try:
                with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port)) as c:
                    c.channel().queue_declare("", exclusive=True)
                break
            except pika.exceptions.AMQPConnectionError:
                assert time.monotonic() < deadline, log.read_text(errors="replace")
                time.sleep(1)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)


def _run_wheel(tokens: list[str], sandbox: Sandbox) -> None:
    """The wheel built as written, in a clone of this repository."""
    _succeeds([sys.executable, *tokens[1:]], sandbox, _clone(sandbox))


def _run_wheel_install(tokens: list[str], sandbox: Sandbox) -> None:
    """The wheel the block built, installed for the driver and the workers: into a directory
    that their Python finds first (PYTHONPATH), because the test's Python already has the
    `spark` extra and its own BatonMQ, which this test must not replace."""
    wheel = _clone(sandbox) / re.sub(r"\[\w+\]$", "", tokens[-1])
    assert wheel.is_file(), f"{tokens[-1]}: the wheel the README builds has another name"
    site = sandbox.path("site")
    _succeeds(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site),
         str(wheel)],
        sandbox, sandbox.directory,
    )  # fmt: skip
    sandbox.environment["PYTHONPATH"] = str(site)


def _run_spark_submit(tokens: list[str], sandbox: Sandbox) -> None:
    """The README's Spark job (its ```python block, as events_job.py) submitted as written to a
    standalone Spark cluster of this machine: a master and a worker started from the installed
    PySpark (`spark-class ...Master` / `...Worker`), whose address replaces `host:7077`, with
    the block's broker for localhost:5672 holding the stream `events` it reads."""
    if not os.environ.get("CI"):  # CI installs both: there this block must run, or fail
        pytest.importorskip("pyspark", reason="the spark extra is not installed")
        if shutil.which("java") is None:
            pytest.skip("Spark needs a Java runtime (CI installs one; there this test must run)")
    import pyspark
    from pyarrow import parquet

    spark_home = Path(pyspark.__file__).parent
    sandbox.environment.update(
        SPARK_HOME=str(spark_home),
        SPARK_WORKER_DIR=str(sandbox.path("spark-work")),  # not under SPARK_HOME
        PYSPARK_PYTHON=sys.executable,
    )
    if sandbox.broker is None:
        sandbox.broker = start_broker(sandbox.directory, environment=sandbox.environment)
    broker = sandbox.broker
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as connection:
        channel = connection.channel()
        for queue in ("events", "copy"):
            channel.queue_declare(queue, durable=True, arguments={"x-queue-type": "stream"})
        channel.confirm_delivery()
        for number in range(150):
            channel.basic_publish("", "events", f"m{number}".encode())
    (job,) = [block for block in BLOCKS if "import batonmq.spark" in block.text]
    code = job.text.replace("amqp://guest:guest@localhost:5672/%2F", broker.url)
    sandbox.path("events_job.py").write_text(_moved(code, sandbox), encoding="utf-8")
    master = f"127.0.0.1:{free_port()}"
    daemons = [
        ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
         "--port", master.split(":")[1], "--webui-port", str(free_port())],
        ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "2",
         "--memory", "1g", "--webui-port", str(free_port()), f"spark://{master}"],
    ]  # fmt: skip
    started: list[subprocess.Popen[bytes]] = []
    try:
        for number, daemon in enumerate(daemons):
            with sandbox.path(f"spark-{number}.log").open("wb") as log:
                started.append(
                    subprocess.Popen(
                        [str(spark_home / "bin" / "spark-class"), *daemon],
                        env=_environment(sandbox),
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        worker_log = sandbox.path("spark-1.log")
        wait_until(
            lambda: "Successfully registered with master" in worker_log.read_text(errors="replace"),
            "the Spark worker to register with its master",
            timeout=120,
        )
        argv = [token.replace("host:7077", master) for token in tokens]
        _succeeds([str(spark_home / "bin" / argv[0]), *argv[1:]], sandbox, sandbox.directory)
    finally:
        for process in started:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(30)
    written = parquet.read_table(sandbox.path("events")).column("offset").to_pylist()
    assert sorted(written) == list(range(150))
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as connection:
        copied = connection.channel().queue_declare("copy", passive=True).method.message_count
    assert copied == 100


Runner = Callable[[str, Sandbox], None]


def _on_words(run: Callable[[list[str], Sandbox], None]) -> Runner:
    return lambda command, sandbox: run(shlex.split(command), sandbox)


def _runner(command: str) -> Runner | None:
    """The runner for a README command, by its first words; None for a command none knows."""
    words = shlex.split(command)
    data_groups = (["db"], ["user"], ["vhost"], ["permissions"], ["acl"])
    if words[:1] == ["batonctl"] and words[1:2] in data_groups:
        return _on_words(_run_batonctl)
    if words[:1] == ["batonctl"] and words[1:2] and words[1] in LIVE_GROUPS:
        return _on_words(_run_live_batonctl)
    if words[:2] == ["git", "worktree"]:
        return _on_words(_run_git)
    if words[:3] == ["python", "-m", "benchmarks.compare"]:
        return _on_words(_run_compare)
    if words[:3] == ["python3", "-m", "venv"]:
        return _run_install
    if words[:4] == ["python", "-m", "pip", "wheel"]:
        return _on_words(_run_wheel)
    if words[:4] == ["python", "-m", "pip", "install"] and words[-1].startswith("dist/"):
        return _on_words(_run_wheel_install)
    if words[:1] == ["spark-submit"]:
        return _on_words(_run_spark_submit)
    return None


# --- the tests --------------------------------------------------------------------------------


def test_every_block_is_known() -> None:
    """The Hardening requirements: "Every TOML and shell block in the README that claims to work
    gets a test that runs it": a block in another language, or a command no runner knows, fails here
    until this test learns to run it (or NOT_RUN says why it is not run)."""
    unknown = [
        f"README.md:{block.line}: {command}"
        for block in BLOCKS
        for command in (block.commands() if block.language == "sh" else [])
        if "\n".join(block.commands()) not in NOT_RUN and _runner(command) is None
    ]
    languages = {f"README.md:{block.line}": block.language for block in BLOCKS}

    assert unknown == []
    assert set(languages.values()) <= {"toml", "sh", "python"}, languages
    python = [block.text for block in BLOCKS if block.language == "python"]
    assert all("import batonmq.spark" in text or "def consume(" in text for text in python)
    assert set(NOT_RUN) <= {"\n".join(block.commands()) for block in BLOCKS}


@pytest.mark.parametrize("block", _blocks("toml"))
def test_a_toml_block_starts_the_broker(block: Block, tmp_path: Path) -> None:
    """The Hardening requirements: "The README's configuration file 'with every key at its default'
    does not start the broker": each configuration block is loaded by the broker, which then serves
    a pika client."""
    config = tmp_path / "batonmq.toml"
    config.write_text(block.text, encoding="utf-8")

    with start_broker(tmp_path, "--config", str(config)) as broker:
        parameters = pika.ConnectionParameters(broker.host, broker.port)
        with pika.BlockingConnection(parameters) as connection:
            declared = connection.channel().queue_declare("readme", durable=True)

    assert declared.method.queue == "readme"
    assert broker.process is not None
    assert broker.process.returncode == 0, broker.log()


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    box = Sandbox(tmp_path)
    yield box
    if box.broker is not None:
        box.broker.stop()


@pytest.mark.timeout(360)
@pytest.mark.parametrize("block", _blocks("sh"))
def test_a_shell_block_runs(block: Block, sandbox: Sandbox) -> None:
    """The Hardening requirements: "Every TOML and shell block in the README that claims to work
    gets a test that runs it." Each command exits 0 with no traceback (and does what its runner
    checks)."""
    for command in block.commands():
        runner = _runner(command)
        assert runner is not None, f"no runner for {command!r}: see test_every_block_is_known"
        runner(command, sandbox)
