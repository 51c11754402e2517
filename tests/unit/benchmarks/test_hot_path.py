"""The in-process hot-path benchmark reports wall and CPU time per message, transient and
persistent (on a real SQLite store)."""

import re

import pytest
from benchmarks.hot_path import main


@pytest.mark.parametrize("persistence", [[], ["--persistent"]])
def test_it_reports_wall_and_cpu_time_per_message(
    capsys: pytest.CaptureFixture[str], persistence: list[str]
) -> None:
    main(["--body", "1024", "--rounds", "1", *persistence])

    printed = capsys.readouterr().out
    found = re.fullmatch(
        r"([\d.]+) us per message \(publish, route, enqueue, deliver, ack\), "
        r"([\d.]+) us of CPU, ([\d.]+) us of it on the engine's thread; best of 5\n",
        printed,
    )
    assert found, printed
    wall, cpu, engine = (float(value) for value in found.groups())
    assert wall > 0
    assert 0 < engine <= cpu
