"""Every way a `batonctl` run can go wrong, as an operator meets it: the installed `batonctl`
command in a process of its own, on a real SQLite data directory, with stdin at its end or
closed. The Hardening requirements: "Every batonctl error is one line on stderr and a non-zero exit,
never a traceback"; README: "Exit status: 0 done, 1 the command failed (one line on stderr), 2 usage
or configuration error"."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

BATONCTL = Path(sys.executable).with_name("batonctl")
FAILED, USAGE = 1, 2


def batonctl(
    tmp_path: Path, *argv: str, stdin: bytes | None = b"", stdin_closed: bool = False
) -> subprocess.CompletedProcess[bytes]:
    """`batonctl --data-dir TMP/data ARGV...` with no BATONMQ variables; stdin holds `stdin`
    (b"": at its end at once), or is closed (`stdin_closed`, as `<&-` in a shell)."""
    environment = {name: value for name, value in os.environ.items() if "BATONMQ" not in name}
    environment["XDG_DATA_HOME"] = str(tmp_path / "xdg")
    command = [str(BATONCTL), "--data-dir", str(tmp_path / "data"), *argv]
    if stdin_closed:
        command = ["sh", "-c", f"exec {shlex.join(command)} <&-"]
        stdin = None
    return subprocess.run(
        command, input=stdin, capture_output=True, cwd=tmp_path, env=environment, timeout=60,
        check=False,
    )  # fmt: skip


def one_line_error(done: subprocess.CompletedProcess[bytes], status: int) -> str:
    """The one line a failed run printed on stderr, having printed nothing else."""
    err = done.stderr.decode(errors="replace")
    assert done.returncode == status, err
    assert done.stdout == b""
    assert "Traceback" not in err
    [line] = err.splitlines()
    assert line.startswith("batonctl: ")
    return line


def test_user_add_without_a_terminal_says_how_to_give_the_password(tmp_path: Path) -> None:
    """The Hardening requirements: "`batonctl user add NAME` with no terminal (EOF at the password
    prompt) prints a traceback: give a one-line error." """
    line = one_line_error(batonctl(tmp_path, "user", "add", "alice"), FAILED)

    assert "--password-stdin" in line


@pytest.mark.parametrize("command", ["add", "passwd"])
def test_asking_for_a_password_with_stdin_closed_is_one_line(command: str, tmp_path: Path) -> None:
    """The Hardening requirements: "Every batonctl error is one line on stderr and a non-zero exit,
    never a traceback." """
    done = batonctl(tmp_path, "user", command, "alice", stdin_closed=True)

    assert "--password-stdin" in one_line_error(done, FAILED)


@pytest.mark.parametrize(
    ("stdin", "stdin_closed", "says"),
    [
        pytest.param(b"", False, "the password is empty", id="at-its-end"),
        pytest.param(None, True, "stdin is closed", id="closed"),
        pytest.param(b"\xff\xfe\n", False, "cannot read the password from stdin", id="not-utf8"),
    ],
)
def test_password_stdin_that_gives_no_password_is_one_line(
    stdin: bytes | None, stdin_closed: bool, says: str, tmp_path: Path
) -> None:
    """The Hardening requirements: "Every batonctl error is one line on stderr and a non-zero exit,
    never a traceback." """
    done = batonctl(
        tmp_path, "user", "add", "alice", "--password-stdin", stdin=stdin, stdin_closed=stdin_closed
    )

    assert says in one_line_error(done, FAILED)


def test_a_missing_configuration_file_is_a_configuration_error(tmp_path: Path) -> None:
    """README: exit status "2 usage or configuration error", on one line."""
    done = batonctl(tmp_path, "--config", "missing.toml", "user", "list")

    assert one_line_error(done, USAGE) == "batonctl: missing.toml: no such file"


def test_a_broken_toml_file_is_a_configuration_error(tmp_path: Path) -> None:
    """README: exit status "2 usage or configuration error", on one line."""
    (tmp_path / "broken.toml").write_text("[broker\n", encoding="utf-8")

    line = one_line_error(batonctl(tmp_path, "--config", "broken.toml", "user", "list"), USAGE)

    assert line.startswith("batonctl: broken.toml: TOML syntax error at line 1")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        pytest.param(["frob"], "invalid choice: 'frob'", id="unknown-group"),
        pytest.param(["user", "frob"], "invalid choice: 'frob'", id="unknown-command"),
        pytest.param([], "the following arguments are required: GROUP", id="no-group"),
        pytest.param(["user", "add"], "the following arguments are required: NAME", id="no-name"),
        pytest.param(["user", "list", "--bogus"], "unrecognized arguments: --bogus", id="bogus"),
    ],
)
def test_a_usage_error_is_one_line_naming_the_help(
    argv: list[str], says: str, tmp_path: Path
) -> None:
    """README: exit status "2 usage or configuration error"; the Hardening requirements: "Every
    batonctl error is one line on stderr"."""
    line = one_line_error(batonctl(tmp_path, *argv), USAGE)

    assert says in line
    assert "--help" in line


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        pytest.param(["user", "list"], "there is no store at", id="no-store"),
        pytest.param(
            ["user", "import", "missing.txt", "--format", "plain"],
            "cannot import missing.txt: [Errno 2] No such file or directory",
            id="import-missing-file",
        ),
        pytest.param(["acl", "check"], "no ACL is configured", id="no-acl"),
        pytest.param(
            ["db", "restore", "--dir", "missing"], "restore failed: ", id="restore-missing-dir"
        ),
    ],
)
def test_a_failed_command_is_one_line_and_status_1(
    argv: list[str], says: str, tmp_path: Path
) -> None:
    """README: "1 the command failed (one line on stderr)"."""
    assert says in one_line_error(batonctl(tmp_path, *argv), FAILED)
