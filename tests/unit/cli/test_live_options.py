"""How batonctl decides between a running broker and a stopped one's data, and whom it logs
in as (batonmq.cli.ctl.choose, batonmq.cli.live.client): without sockets, on parsed command
lines. The management issue: "The offline commands that work on a stopped broker's data
directory (`batonctl --data-dir DIR user …`, `vhost …`, `db …`) keep working as they do
today; with `--url` (or no `--data-dir`) they go to the running broker"."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from batonmq.cli import ctl
from batonmq.cli.live.client import (
    DEFAULT_CREDENTIALS,
    ApiRefused,
    BrokerClient,
    Credentials,
    api_url,
    checked_url,
    credentials,
    quoted,
)
from batonmq.cli.storecommand import CommandFailed


def parsed(*argv: str) -> argparse.Namespace:
    return ctl._parser().parse_args(argv)


@pytest.mark.parametrize(
    ("argv", "environ", "way"),
    [
        pytest.param(["user", "add", "bob"], {}, "live", id="shared-no-data-named"),
        pytest.param(["--url", "http://h:1", "vhost", "add", "v"], {}, "live", id="shared-url"),
        pytest.param(["--data-dir", "d", "user", "add", "bob"], {}, "data", id="shared-data-dir"),
        pytest.param(["--config", "c.toml", "user", "tags", "b"], {}, "data", id="shared-config"),
        pytest.param(["--store", "sqlite", "vhost", "delete", "v"], {}, "data", id="shared-store"),
        pytest.param(
            ["user", "delete", "bob"], {"BATONMQ__BROKER__DATA_DIR": "d"}, "data", id="env-dir"
        ),
        pytest.param(
            ["user", "passwd", "bob"], {"BATONMQ__PERSIST__STORE": "sqlite"}, "data", id="env-store"
        ),
        pytest.param(["user", "add", "bob"], {"BATONMQ_CONFIG": "c.toml"}, "data", id="env-file"),
        pytest.param(
            ["user", "add", "bob"], {"BATONMQ__LOG__LEVEL": "debug"}, "live", id="env-unrelated"
        ),
        pytest.param(["user", "add", "bob"], {"BATONMQ_CONFIG": ""}, "live", id="env-file-empty"),
        pytest.param(
            ["--user", "admin", "user", "add", "bob"],
            {"BATONMQ__BROKER__DATA_DIR": "d"},
            "live",
            id="live-option-wins-over-env",
        ),
        pytest.param(["user", "list"], {}, "data", id="data-only-user-list"),
        pytest.param(["db", "stats"], {}, "data", id="data-only-db"),
        pytest.param(["status"], {"BATONMQ__BROKER__DATA_DIR": "d"}, "live", id="live-only"),
        pytest.param(["list", "queues"], {}, "live", id="live-list"),
    ],
)
def test_which_way_a_command_runs(argv: list[str], environ: dict[str, str], way: str) -> None:
    assert ctl.choose(parsed(*argv), environ) == way


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        pytest.param(
            ["--url", "http://h:1", "--data-dir", "d", "user", "add", "b"],
            "--url is for a running broker and --data-dir for a stopped one's data: give one kind",
            id="both",
        ),
        pytest.param(
            ["--url", "http://h:1", "db", "stats"],
            "`db stats` works on a stopped broker's data: --url is for a running one",
            id="url-for-data",
        ),
        pytest.param(
            ["--password-file", "f", "--config", "c.toml", "user", "add", "b"],
            "--password-file is for a running broker and --config for a stopped one's data: "
            "give one kind",
            id="both-kinds",
        ),
        pytest.param(
            ["--user", "admin", "user", "import", "f", "--format", "plain"],
            "`user import` works on a stopped broker's data: --user is for a running one",
            id="live-option-for-data",
        ),
        pytest.param(
            ["--data-dir", "d", "purge", "queue", "q"],
            "`purge queue` talks to a running broker: --data-dir is for a stopped one's data",
            id="data-for-live",
        ),
    ],
)
def test_options_for_the_other_way_are_a_usage_error(argv: list[str], says: str) -> None:
    with pytest.raises(CommandFailed) as raised:
        ctl.choose(parsed(*argv), {})

    assert (str(raised.value), raised.value.status) == (says, 2)


def test_the_api_password_is_not_the_new_users_password() -> None:
    """`--password` before the group logs in; after `user add NAME` it is the new user's."""
    args = parsed(
        "--user", "admin", "--password", "login", "user", "add", "bob", "--password", "new"
    )

    assert (args.api_user, args.api_password, args.password) == ("admin", "login", "new")


# --- whom batonctl logs in as ----------------------------------------------------------------


def test_credentials_by_precedence(tmp_path: Path) -> None:
    """Options first, then BATONCTL_USER / BATONCTL_PASSWORD, then RabbitMQ's guest/guest."""
    secret = tmp_path / "secret"
    secret.write_text("from-file\nsecond line\n", encoding="utf-8")
    secret.chmod(0o600)
    environ = {"BATONCTL_USER": "env-user", "BATONCTL_PASSWORD": "env-pw"}

    assert credentials(None, None, None, {}) == Credentials(*DEFAULT_CREDENTIALS)
    assert credentials(None, None, None, environ) == Credentials("env-user", "env-pw")
    assert credentials("me", None, secret, environ) == Credentials("me", "from-file")
    assert credentials("me", "typed", None, environ) == Credentials("me", "typed")


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o601])
def test_a_password_file_others_may_read_is_refused(mode: int, tmp_path: Path) -> None:
    """As ssh refuses a private key others can read: only its owner may read the file
    (mode 0600 or stricter)."""
    secret = tmp_path / "secret"
    secret.write_text("pw\n", encoding="utf-8")
    secret.chmod(mode)

    with pytest.raises(CommandFailed) as raised:
        credentials(None, None, secret, {})

    assert f"others may read it (mode {mode:04o})" in str(raised.value)
    assert f"chmod 600 {secret}" in str(raised.value)
    assert raised.value.status == 2


@pytest.mark.parametrize("mode", [0o600, 0o400])
def test_a_password_file_only_its_owner_may_read_is_taken(mode: int, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("pw\r\n", encoding="utf-8")
    secret.chmod(mode)

    assert credentials("u", None, secret, {}).password == "pw"


def test_a_missing_or_empty_password_file(tmp_path: Path) -> None:
    with pytest.raises(CommandFailed, match="No such file or directory"):
        credentials(None, None, tmp_path / "missing", {})
    empty = tmp_path / "empty"
    empty.write_text("\n", encoding="utf-8")
    empty.chmod(0o600)
    with pytest.raises(CommandFailed, match="the first line is empty"):
        credentials(None, None, empty, {})


def test_an_unreadable_password_file(tmp_path: Path) -> None:
    """A password file that cannot be read is a clear error (a directory: unreadable as a file
    even for root, who reads any file whatever its mode)."""
    secret = tmp_path / "secret"
    secret.mkdir(mode=0o700)

    with pytest.raises(CommandFailed, match="Is a directory"):
        credentials(None, None, secret, {})


# --- the URL ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "base"),
    [
        ("http://localhost:15672", "http://localhost:15672"),
        ("https://mq.example:15671/", "https://mq.example:15671"),
    ],
)
def test_a_url_is_http_or_https(url: str, base: str) -> None:
    assert checked_url(url) == base
    assert BrokerClient(url, Credentials("u", "p")).url == base


def test_the_url_by_precedence() -> None:
    """--url, then BATONCTL_URL, then RabbitMQ's management port on this host."""
    environ = {"BATONCTL_URL": "http://mq.example:8080/"}

    assert api_url(None, {}) == "http://localhost:15672"
    assert api_url(None, environ) == "http://mq.example:8080"
    assert api_url("https://other:15671", environ) == "https://other:15671"


@pytest.mark.parametrize("url", ["localhost:15672", "amqp://localhost", "http://", "ftp://h/"])
def test_another_url_is_a_usage_error(url: str) -> None:
    with pytest.raises(CommandFailed, match="expected http://HOST:PORT") as raised:
        checked_url(url)

    assert raised.value.status == 2


def test_an_error_answer_is_one_clear_reason() -> None:
    """RabbitMQ's error body {"error", "reason"}: the reason, with the status and the error
    where the reason does not already say it."""
    assert str(ApiRefused(404, "Object Not Found", "Not Found")) == "not found"
    assert str(ApiRefused(401, "not_authorised", "Not administrator user")) == (
        "Not administrator user (401 not_authorised)"
    )
    assert str(ApiRefused(400, "bad_request", "bad_request")) == "bad_request (400)"


def test_path_segments_are_quoted_whole() -> None:
    """RabbitMQ's API: the virtual host "/" is %2F; a connection's name holds spaces and ">"."""
    assert quoted("/", "a b") == "%2F/a%20b"
    assert quoted("127.0.0.1:5 -> 127.0.0.1:6") == "127.0.0.1%3A5%20-%3E%20127.0.0.1%3A6"


#: Each live command, and the arguments its `what` names.
LIVE_COMMANDS = {
    "status": [],
    "metrics": [],
    "log level": [],
    "list": ["queues"],
    "query queue": ["q"],
    "purge queue": ["q"],
    "delete queue": ["q"],
    "pause queue": ["q"],
    "resume queue": ["q"],
    "close connection": ["c"],
    "definitions export": ["f"],
    "definitions import": ["f"],
    "user add": ["u"],
    "user passwd": ["u"],
    "user tags": ["u"],
    "user delete": ["u"],
    "vhost add": ["v"],
    "vhost delete": ["v"],
    "permissions list": [],
    "permissions set": ["bob", ".*", "", "^q$", "--vhost", "v"],
    "permissions clear": ["bob"],
    "query bkr": [],
    "takeover bkr": ["-n", "B"],
    "quiesce bkr": [],
    "unquiesce bkr": [],
    "shutdown bkr": [],
}


def _live_commands(prefix: str, parser: argparse.ArgumentParser) -> set[str]:
    """The commands of `parser` that run live (those with a `live` default)."""
    found = {prefix} if parser.get_default("live") is not None else set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, subparser in action.choices.items():
                found |= _live_commands(f"{prefix} {name}".strip(), subparser)
    return found


def test_every_live_command_says_what_failed() -> None:
    """A failure is one line, "batonctl: <what failed>: <reason>": each live command's `what`
    formats with its own arguments (a name it lacks would be a traceback)."""
    assert _live_commands("", ctl._parser()) == set(LIVE_COMMANDS)
    for command, arguments in LIVE_COMMANDS.items():
        args = parsed(*command.split(), *arguments)
        what = str(args.what).format_map(vars(args))
        assert what.startswith("cannot ")
        assert "{" not in what
