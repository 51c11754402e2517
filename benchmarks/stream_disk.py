"""Does a consumer replay a stream at disk speed? A 1 GB stream replayed beside `dd` of its files.

Stream queues are meant to let "a consumer replay a 1 GB stream at disk speed (reads are
sequential and batched, no per-message store round trip)". For each body size (`--body-sizes`:
1 KiB, 16 KiB and 64 KiB by default) this fills one stream queue of a fresh BatonMQ (SQLite
store) with `--bytes` of message bodies (publishers with confirms; not measured), then reads it
all, from `x-stream-offset: first`, with one consumer of the load generator (basic.qos, acks),
and reads the stream's segment files with `dd` the same way:

- cold: the page cache dropped first (`sync; echo 3 > /proc/sys/vm/drop_caches`, which needs
  root; without it there is no cold figure and the output says why), so both read the disk;
- warm: straight after, the files in the page cache: what the broker costs beyond the disk.

MB/s is the segment files' bytes (chunk headers and message properties included, as `dd` reads
them) over the replay's time, from its basic.consume to its last delivery; CPU us/msg is the
broker's. Each message is its own basic.deliver, content header and body frame in AMQP 0-9-1,
so at small bodies the broker's CPU per message, not the disk, sets the pace: the rows show
where disk speed is reachable. The consumer is the load generator's raw-socket one (frames
scanned, not decoded; one basic.ack multiple per socket read); its CPU share of one core is
reported beside each replay, to show it is not what limits it.

    python -m benchmarks.stream_disk                      # 1 GB each of 1, 16 and 64 KiB bodies
    python -m benchmarks.stream_disk --bytes 200000000 --body-sizes 4096 --json out.json
    python -m benchmarks.stream_disk --profile /tmp/flames  # py-spy flame graphs of each replay
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from batonmq.queues.streams.chunk import HEADER_SIZE, decode_header
from batonmq.queues.streams.files import FILE_HEADER
from benchmarks.brokers.batonmq import BatonMQ
from benchmarks.loadgen.client import connect
from benchmarks.loadgen.publisher import PublisherPlan
from benchmarks.procstats import machine_busy_seconds
from benchmarks.results import Measurement
from benchmarks.runner import RunSettings, fill_stream, replay_stream
from benchmarks.topology import Topology, declare

QUEUE = "bench.stream-disk"
DROP_CACHES = Path("/proc/sys/vm/drop_caches")
BODY_SIZES = (1024, 16384, 65536)


@dataclass(frozen=True, slots=True)
class Read:
    """One read of the whole stream: by the broker's consumer or by dd."""

    reader: str
    cache: str
    seconds: float
    stream_bytes: int
    cpu_us_per_message: float | None = None
    messages: int = 0
    #: The consumer's (load generator's) CPU seconds over the read.
    consumer_cpu_seconds: float | None = None

    @property
    def megabytes_per_second(self) -> float:
        return self.stream_bytes / self.seconds / 1e6

    @property
    def consumer_busy(self) -> float | None:
        """The share of one core the consumer kept busy: near 1, it was the limit."""
        if self.consumer_cpu_seconds is None:
            return None
        return self.consumer_cpu_seconds / self.seconds

    def to_json(self) -> dict[str, object]:
        return {
            "reader": self.reader,
            "cache": self.cache,
            "seconds": self.seconds,
            "stream_bytes": self.stream_bytes,
            "mb_per_second": self.megabytes_per_second,
            "messages": self.messages,
            "messages_per_second": self.messages / self.seconds if self.messages else None,
            "cpu_us_per_message": self.cpu_us_per_message,
            "consumer_busy": self.consumer_busy,
        }


def drop_page_cache() -> str | None:
    """Write dirty pages out and drop the page cache; None, or why it could not be dropped."""
    subprocess.run(["sync"], check=True)
    try:
        DROP_CACHES.write_text("3\n")
    except OSError as error:
        return f"the page cache could not be dropped ({error.strerror}: needs root)"
    return None


def dd_seconds(files: list[Path]) -> float:
    """Seconds `dd bs=1M` takes to read `files` one after the other, as the replay reads them."""
    started = time.monotonic()
    for path in files:
        subprocess.run(
            ["dd", f"if={path}", "of=/dev/null", "bs=1M"],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    return time.monotonic() - started


def chunks_in(files: list[Path]) -> int:
    """How many chunks the segment files hold (their headers walked, read-only): the reads of
    a replay are whole chunks, so their size is the read size."""
    chunks = 0
    for path in files:
        with path.open("rb") as segment:
            position, end = len(FILE_HEADER), os.fstat(segment.fileno()).st_size
            while position + HEADER_SIZE <= end:
                position += decode_header(os.pread(segment.fileno(), HEADER_SIZE, position)).size
                chunks += 1
    return chunks


def segment_files(broker: BatonMQ) -> list[Path]:
    assert broker.directory is not None
    return sorted(broker.directory.rglob("*.segment"))


async def _declare(broker: BatonMQ) -> None:
    client = await connect(broker.endpoint)
    try:
        await declare(client, Topology((QUEUE,), durable=True, stream=True))
    finally:
        await client.close()


@contextlib.contextmanager
def flame_graph(pids: list[int], output: Path | None) -> Iterator[None]:
    """py-spy recording `pids` (the broker) into the flame graph `output` while in the block;
    nothing without an `output`."""
    if output is None or not pids:
        yield
        return
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    output.parent.mkdir(parents=True, exist_ok=True)
    recorder = subprocess.Popen(
        [py_spy, "record", "--pid", str(pids[0]), "--rate", "200", "--output", str(output)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.5)  # attached before the replay starts
        yield
    finally:
        recorder.send_signal(signal.SIGINT)
        recorder.wait(timeout=60)


@dataclass(slots=True)
class Result:
    messages: int
    body_size: int
    stream_bytes: int = 0
    segments: int = 0
    chunks: int = 0
    fill_seconds: float = 0.0
    page_cache: str = "dropped before each cold read"
    reads: list[Read] = field(default_factory=list)
    #: Cores the whole machine kept busy on average during the run (2 = all of this one's).
    machine_busy_cores: float = 0.0

    def find(self, reader: str, cache: str) -> Read | None:
        found = [read for read in self.reads if (read.reader, read.cache) == (reader, cache)]
        return found[0] if found else None

    def ratio_to_dd(self, cache: str) -> float | None:
        ours, theirs = self.find("batonmq", cache), self.find("dd", cache)
        if ours is None or theirs is None:
            return None
        return ours.megabytes_per_second / theirs.megabytes_per_second

    def to_json(self) -> dict[str, object]:
        data = {name: getattr(self, name) for name in self.__slots__ if name != "reads"}
        data["reads"] = [read.to_json() for read in self.reads]
        data["replay_to_dd"] = {cache: self.ratio_to_dd(cache) for cache in ("cold", "warm")}
        return data


def run(
    total_bytes: int, body_size: int, publishers: int, timeout: float, profile: Path | None
) -> Result:
    messages = total_bytes // body_size // publishers * publishers
    result = Result(messages, body_size)
    settings = RunSettings(memory_timeout=timeout)
    plans = [
        PublisherPlan(
            routes=(("", QUEUE),),
            body_size=body_size,
            persistent=True,
            confirm_window=settings.confirm_window,
            count=messages // publishers,
        )
        for _ in range(publishers)
    ]
    busy_before, started = machine_busy_seconds(), time.monotonic()
    with BatonMQ() as broker:
        asyncio.run(_declare(broker))
        _say(f"filling the stream with {messages:,} messages of {body_size:,} B ...")
        result.fill_seconds = fill_stream(broker, QUEUE, plans, settings).publish_seconds
        files = segment_files(broker)
        result.segments = len(files)
        result.stream_bytes = stream_bytes = sum(path.stat().st_size for path in files)
        result.chunks = chunks_in(files)
        _say(
            f"  {stream_bytes / 1e6:,.0f} MB in {len(files)} segment file(s), "
            f"{result.chunks:,} chunks of {stream_bytes / result.chunks / 1e3:,.0f} kB on average"
        )
        for cache in ("cold", "warm"):
            if cache == "cold":
                not_dropped = drop_page_cache()
                if not_dropped:
                    result.page_cache = not_dropped
                    _say(f"  no cold read: {not_dropped}")
                    continue
                result.reads.append(Read("dd", cache, dd_seconds(files), stream_bytes))
                drop_page_cache()
            measurement = Measurement("stream-disk", broker.name)
            flames = profile / f"replay-{body_size}B-{cache}.svg" if profile else None
            with flame_graph(broker.measured_pids(), flames):
                replay_stream(broker, QUEUE, messages, settings, measurement)
            if measurement.error:
                raise RuntimeError(f"the {cache} replay failed: {measurement.error}")
            result.reads.append(
                Read(
                    "batonmq",
                    cache,
                    measurement.seconds,
                    stream_bytes,
                    measurement.cpu_us_per_message,
                    measurement.delivered,
                    measurement.client_cpu_seconds,
                )
            )
            if cache == "warm":
                result.reads.append(Read("dd", cache, dd_seconds(files), stream_bytes))
            for read in result.reads[-2:]:
                _say(f"  {_line(read)}")
    result.machine_busy_cores = (machine_busy_seconds() - busy_before) / (
        time.monotonic() - started
    )
    return result


def _line(read: Read) -> str:
    rate = f"{read.messages / read.seconds:,.0f} msgs/s, " if read.messages else ""
    cpu = (
        f", broker CPU {read.cpu_us_per_message:.1f} us/msg"
        if read.cpu_us_per_message is not None
        else ""
    )
    consumer = (
        f", consumer {read.consumer_busy:.2f} of a core" if read.consumer_busy is not None else ""
    )
    return (
        f"{read.reader:<8} {read.cache:<5} {read.megabytes_per_second:8,.1f} MB/s "
        f"({rate}{read.seconds:.2f} s{cpu}{consumer})"
    )


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _report(result: Result) -> None:
    print(
        f"stream of {result.messages:,} x {result.body_size:,} B bodies: "
        f"{result.stream_bytes:,} B in {result.segments} segment file(s), filled in "
        f"{result.fill_seconds:.1f} s; page cache: {result.page_cache}"
    )
    for cache in ("cold", "warm"):
        ours, theirs, ratio = (
            result.find("batonmq", cache),
            result.find("dd", cache),
            result.ratio_to_dd(cache),
        )
        if ours and theirs and ratio is not None:
            print(f"  {cache}: {_line(ours)}; {_line(theirs)}; replay/dd {ratio:.3f}")
    print(f"  machine: {result.machine_busy_cores:.2f} cores busy on average during the run")


def _sizes(text: str) -> tuple[int, ...]:
    return tuple(int(size) for size in text.split(","))


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.stream_disk",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--bytes", type=int, default=10**9, help="bodies per size (1 GB)")
    parser.add_argument(
        "--body-sizes",
        type=_sizes,
        default=BODY_SIZES,
        help="comma-separated body sizes in bytes, one stream each (1024,16384,65536)",
    )
    parser.add_argument("--publishers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per fill or read")
    parser.add_argument(
        "--profile",
        type=Path,
        help="write a py-spy flame graph of each replay in this directory (needs py-spy)",
    )
    parser.add_argument("--json", type=Path, help="also write the results here (a list)")
    arguments = parser.parse_args()
    results = []
    for body_size in arguments.body_sizes:
        result = run(
            arguments.bytes,
            body_size,
            arguments.publishers,
            arguments.timeout,
            arguments.profile,
        )
        _report(result)
        results.append(result)
    if arguments.json:
        arguments.json.write_text(
            json.dumps([result.to_json() for result in results], indent=2) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
