"""The in-process hot-path benchmark reports wall and CPU time per message."""

import re

import pytest
from benchmarks.hot_path import main


def test_it_reports_wall_and_cpu_time_per_message(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--body", "1024", "--rounds", "1"])

    printed = capsys.readouterr().out
    found = re.fullmatch(
        r"([\d.]+) us per message \(publish, route, enqueue, deliver, ack\), "
        r"([\d.]+) us of CPU; best of 5\n",
        printed,
    )
    assert found, printed
    wall, cpu = (float(value) for value in found.groups())
    assert wall > 0
    assert cpu > 0
