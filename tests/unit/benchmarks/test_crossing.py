"""The in-process crossing benchmark moves every message of each case between two workers
linked by a real socket pair, and reports each case's CPU time per message against the case
where nothing crosses."""

import re

import pytest
from benchmarks.crossing import CASES, main


def test_it_reports_each_case_against_the_one_where_nothing_crosses(
    capsys: pytest.CaptureFixture[str],
) -> None:
    main(["--body", "512", "--rounds", "1"])

    lines = capsys.readouterr().out.splitlines()
    assert [line[:22].rstrip() for line in lines] == [name for name, _, _ in CASES]
    costs = []
    for line in lines:
        found = re.search(r"([\d.]+) us of CPU per message, ([\d.]+)x$", line)
        assert found, line
        costs.append((float(found[1]), float(found[2])))
    local = costs[0][0]
    for cost, ratio in costs:
        assert cost > 0
        # Each ratio is the case's cost over the first case's, as printed (to 0.01).
        assert ratio == pytest.approx(cost / local, abs=0.01)
