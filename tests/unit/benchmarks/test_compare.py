"""The harness's command line: --build NAME=PATH names another BatonMQ source tree to run."""

from pathlib import Path

import pytest
from benchmarks.brokers.batonmq import Build
from benchmarks.compare import _parser, main

ROOT = Path(__file__).resolve().parents[3]


def test_a_build_is_a_name_and_a_source_tree():
    arguments = _parser().parse_args(["--build", f"before_1={ROOT}", "--build", f"after={ROOT}"])
    assert arguments.build == [Build("before_1", ROOT), Build("after", ROOT)]


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (f"{ROOT}", "expected NAME=PATH"),
        (f"a@b={ROOT}", "expected NAME=PATH"),
        ("old=/nonexistent", "holds no BatonMQ source tree"),
    ],
)
def test_a_build_that_is_not_a_name_and_a_source_tree_is_refused(value, says, capsys):
    with pytest.raises(SystemExit) as exited:
        _parser().parse_args(["--build", value])
    assert exited.value.code == 2
    assert says in capsys.readouterr().err


def test_two_builds_of_one_name_are_refused(capsys):
    assert main(["--build", f"x={ROOT}", "--build", f"x={ROOT}", "--list"]) == 2
    assert "--build names must differ: x, x" in capsys.readouterr().err


def test_a_builds_broker_can_be_skipped_by_its_name():
    """`--skip batonmq@old` leaves out the SQLite broker of build `old` (to compare PostgreSQL
    rows only, say), where the choices once named this tree's brokers only."""
    assert main(["--build", f"old={ROOT}", "--skip", "batonmq@old", "--list"]) == 0


@pytest.mark.parametrize("name", ["batonmq@nope", "activemq"])
def test_skipping_a_broker_that_no_row_has_is_refused(name, capsys):
    assert main(["--build", f"old={ROOT}", "--skip", name, "--list"]) == 2
    assert f"--skip: no broker named {name}" in capsys.readouterr().err
