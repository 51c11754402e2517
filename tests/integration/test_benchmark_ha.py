"""The HA benchmark (benchmarks/ha.py) runs end to end: a row on the standalone broker and on an
HA member, and a failover, with the rows and the failover time printed as the Qpid broker
manual's performance table (1.6.16, Table 1.6) and the HA issue ask ("failover time from kill
to first message consumed from a survivor")."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(240)
def test_the_ha_benchmark_prints_a_row_and_a_failover_time() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.ha", "--pairs", "1", "--duration", "1",
         "--failovers", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=220, check=False,
    )  # fmt: skip

    assert done.returncode == 0, done.stdout + done.stderr
    row = re.search(r"^  1/1 +([\d,]+) +([\d,]+) +[+-][\d.]+%", done.stdout, re.MULTILINE)
    assert row is not None, done.stdout
    assert all(int(rate.replace(",", "")) > 0 for rate in row.groups()), done.stdout
    failover = re.search(r"median ([\d.]+) s", done.stdout)
    assert failover is not None and 0 < float(failover.group(1)) < 60, done.stdout
    assert "'s log:" not in done.stdout, done.stdout
