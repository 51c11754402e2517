"""The `batonctl` command without a real store: parsing, usage and configuration errors, help,
what each `db` command asks of the store and prints, and how failures are reported (a stand-in
store; tests/integration/test_batonctl_db.py runs the same commands on the real ones)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from batonmq import __version__
from batonmq.cli import storecommand
from batonmq.cli.ctl import main
from batonmq.config import Config
from batonmq.store.base import (
    SCHEMA_VERSION,
    SchemaTooNew,
    SchemaTooOld,
    StoreCorrupt,
    StoreError,
    StoreLocked,
    StoreStats,
    StoreUnavailable,
)

COMMANDS = {
    "create": ["db", "create"],
    "upgrade": ["db", "upgrade"],
    "backup": ["db", "backup", "--dir", "{tmp}/backup"],
    "restore": ["db", "restore", "--dir", "{tmp}/backup"],
    "stats": ["db", "stats"],
}
#: The "<what failed>" each command reports.
WHAT_FAILED = {
    "create": "cannot create the schema",
    "upgrade": "cannot upgrade the schema",
    "backup": "backup failed",
    "restore": "restore failed",
    "stats": "cannot read the store's statistics",
}


@dataclass
class FakeStore:
    """A `Store` that records what the command asks of it; `fail` makes one method raise
    ("lock": an open with the lock)."""

    version: int = SCHEMA_VERSION
    #: The version open finds before it creates anything (0: an empty store)...
    found: int | None = None
    #: ...and whether an open with create and the lock then creates the schema.
    creates: bool = True
    fail: dict[str, BaseException] = field(default_factory=dict)
    upgraded_from: int | None = None
    opens: list[dict[str, bool]] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    is_open: bool = False

    kind = "fake"
    location = "fake://store"

    @property
    def schema_version(self) -> int:
        return self.version

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if name in self.fail:
            raise self.fail[name]

    async def open(
        self,
        *,
        create: bool = True,
        migrate: bool = True,
        lock: bool = True,
        replace_lost: bool = False,
        catalogue_only: bool = False,
    ) -> None:
        assert not self.is_open
        del catalogue_only
        self.opens.append(
            {"create": create, "migrate": migrate, "lock": lock, "replace_lost": replace_lost}
        )
        self._call("open")
        if lock and "lock" in self.fail:
            raise self.fail["lock"]
        if self.found is not None:
            self.version = self.found
            if lock and create and self.found == 0 and self.creates:
                self.version = SCHEMA_VERSION
        self.is_open = True

    async def stats(self) -> StoreStats:
        self._call("stats")
        return StoreStats("fake", self.location, self.version, "batonmq", 1, 2, 3, 40, 50, 6000, 7)

    async def backup(self, directory: Path) -> None:
        self._call("backup")
        directory.mkdir(parents=True, exist_ok=True)
        manifest = {"kind": "fake", "schema_version": 1, "messages": 40, "entries": 50}
        (directory / "manifest.json").write_text(json.dumps(manifest))

    async def restore(self, directory: Path) -> None:
        self._call("restore")

    async def upgrade(self) -> tuple[int, int]:
        self._call("upgrade")
        found = self.upgraded_from if self.upgraded_from is not None else self.version
        self.version = SCHEMA_VERSION
        return found, SCHEMA_VERSION

    async def close(self) -> None:
        self.calls.append("close")
        self.is_open = False


@dataclass
class Stores:
    """The stand-in `configured_store`: the configurations it was given, and its store."""

    store: FakeStore = field(default_factory=FakeStore)
    configs: list[Config] = field(default_factory=list)

    def __call__(self, config: Config) -> FakeStore:
        self.configs.append(config)
        return self.store


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No BATONMQ variables from the caller, and the default data_dir under tmp_path."""
    for name in list(os.environ):
        if name.startswith("BATONMQ"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


@pytest.fixture
def stores(monkeypatch: pytest.MonkeyPatch) -> Stores:
    fake = Stores()
    monkeypatch.setattr(storecommand, "configured_store", fake)
    return fake


def argv_for(command: str, tmp_path: Path) -> list[str]:
    return [part.replace("{tmp}", str(tmp_path)) for part in COMMANDS[command]]


def with_backup(tmp_path: Path) -> Path:
    """A directory that looks like a backup to `restore`'s own check."""
    directory = tmp_path / "backup"
    directory.mkdir()
    (directory / "manifest.json").write_text("{}")
    return directory


# --- help and version: no configuration read, no store made -----------------------------------


def test_help_lists_the_options_and_the_groups(
    stores: Stores, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--help"]) == 0

    out = capsys.readouterr().out
    assert out.startswith("usage: batonctl ")
    for option in ("--config FILE", "--data-dir DIR", "--store sqlite|postgres", "--dsn DSN"):
        assert option in out
    assert "    db  " in out
    assert stores.configs == []


def test_db_help_lists_the_commands(stores: Stores, capsys: pytest.CaptureFixture[str]) -> None:
    """MQ 4.1 HA guide Table 8 (imqdbmgr create tbl, upgrade, backup, restore), plus stats."""
    assert main(["db", "--help"]) == 0

    out = capsys.readouterr().out
    for command in ("create", "upgrade", "backup", "restore", "stats"):
        assert f"    {command} " in out
    assert stores.configs == []


@pytest.mark.parametrize(
    ("command", "option"), [("backup", "--dir DIR"), ("restore", "--dir DIR"), ("stats", "--json")]
)
def test_command_help_shows_its_options(
    command: str, option: str, stores: Stores, capsys: pytest.CaptureFixture[str]
) -> None:
    """MQ 4.1 HA guide Table 9: backup and restore take the directory as -dir dirPath."""
    assert main(["db", command, "--help"]) == 0

    assert option in capsys.readouterr().out
    assert stores.configs == []


def test_version(stores: Stores, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0

    assert capsys.readouterr().out == f"batonctl {__version__}\n"


# --- usage errors: exit status 2, one line naming the help to read, no store made ----------------


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        pytest.param([], "the following arguments are required: GROUP", id="no-group"),
        pytest.param(["db"], "the following arguments are required: COMMAND", id="no-command"),
        pytest.param(["queue"], "invalid choice: 'queue'", id="unknown-group"),
        pytest.param(["db", "drop"], "invalid choice: 'drop'", id="unknown-command"),
        pytest.param(["db", "backup"], "required: --dir", id="backup-without-dir"),
        pytest.param(["db", "restore"], "required: --dir", id="restore-without-dir"),
        pytest.param(["--bogus", "db", "stats"], "unrecognized arguments: --bogus", id="bogus"),
        pytest.param(["db", "stats", "--yaml"], "unrecognized arguments: --yaml", id="yaml"),
    ],
)
def test_usage_errors(
    argv: list[str], complaint: str, stores: Stores, capsys: pytest.CaptureFixture[str]
) -> None:
    """The Hardening requirements: "Every batonctl error is one line on stderr and a non-zero exit,
    never a traceback"; README: exit status "2 usage or configuration error"."""
    assert main(argv) == 2

    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("batonctl: ")
    assert complaint in line
    assert line.endswith("--help`)")
    assert stores.configs == []


# --- the configuration: the same sources as batonmq, flags winning ------------------------------


def test_flags_select_the_store(stores: Stores, tmp_path: Path) -> None:
    dsn = "postgresql://mq@db.example/mq"

    argv = ["--data-dir", str(tmp_path / "d"), "--store", "postgres", "--dsn", dsn]

    assert main([*argv, "db", "stats"]) == 0

    [config] = stores.configs
    assert config.data_dir == tmp_path / "d"
    assert (config.persist.store, config.persist.postgres.dsn) == ("postgres", dsn)


def test_flag_beats_environment_beats_file(
    stores: Stores, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As for batonmq: "Flags win over the environment, which wins over the file"."""
    path = tmp_path / "batonmq.toml"
    path.write_text(
        "[broker]\nname = 'east'\ndata_dir = 'from-file'\n"
        "[persist]\nstore = 'postgres'\n[persist.postgres]\ndsn = 'postgresql://file/db'\n"
    )
    monkeypatch.setenv("BATONMQ__PERSIST__POSTGRES__DSN", "postgresql://environment/db")

    assert main(["--config", str(path), "db", "stats"]) == 0
    assert main(["--config", str(path), "--dsn", "postgresql://flag/db", "db", "stats"]) == 0
    assert main(["--config", str(path), "--store", "sqlite", "db", "stats"]) == 0

    from_environment, from_flag, sqlite = stores.configs
    assert from_environment.broker_name == "east"
    assert from_environment.data_dir == tmp_path / "from-file"
    assert from_environment.persist.postgres.dsn == "postgresql://environment/db"
    assert from_flag.persist.postgres.dsn == "postgresql://flag/db"
    assert sqlite.persist.store == "sqlite"


def run_failing(argv: list[str], capsys: pytest.CaptureFixture[str], stores: Stores) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2
    assert "Traceback" not in err
    assert stores.configs == []
    return err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        pytest.param(
            ["--store", "mysql", "db", "stats"],
            "batonctl: --store: persist.store: expected one of 'sqlite', 'postgres', got 'mysql'\n",
            id="unknown-store",
        ),
        pytest.param(
            ["--store", "postgres", "db", "stats"],
            'batonctl: --dsn: persist.postgres.dsn: must be set when persist.store is "postgres"\n',
            id="postgres-without-dsn",
        ),
        pytest.param(
            ["--data-dir", "", "db", "stats"],
            "batonctl: --data-dir: broker.data_dir: must not be empty\n",
            id="empty-data-dir",
        ),
    ],
)
def test_configuration_errors_exit_2_like_batonmq(
    argv: list[str], expected: str, stores: Stores, capsys: pytest.CaptureFixture[str]
) -> None:
    """batonmq's rule: a configuration error is one line naming the flag, and exit status 2."""
    assert run_failing(argv, capsys, stores) == expected


def test_a_broken_configuration_file(
    stores: Stores, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "batonmq.toml"
    path.write_text("[persist\nstore = 'sqlite'\n")

    err = run_failing(["--config", str(path), "db", "stats"], capsys, stores)

    assert err.startswith(f"batonctl: {path}: TOML syntax error at line 1, column ")


def test_a_bad_environment_value(
    stores: Stores, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BATONMQ__PERSIST__STORE", "oracle")

    err = run_failing(["db", "stats"], capsys, stores)

    assert err == (
        "batonctl: environment variable BATONMQ__PERSIST__STORE: persist.store: expected one of "
        "'sqlite', 'postgres', got 'oracle'\n"
    )


def test_a_dsn_that_is_not_a_uri_is_a_configuration_error_without_its_password(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue: the DSN's password must never be printed (the real configured_store here)."""
    argv = ["--store", "postgres", "--dsn", "postgresql://mq:hunter2@[::1/mq", "db", "stats"]

    assert main(argv) == 2

    captured = capsys.readouterr()
    assert captured.err == "batonctl: persist.postgres.dsn: Invalid IPv6 URL\n"
    assert "hunter2" not in captured.out + captured.err


def test_a_bad_postgres_schema_name_is_a_configuration_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BATONMQ__PERSIST__POSTGRES__SCHEMA", "Bad-Name")
    argv = ["--store", "postgres", "--dsn", "postgresql://mq@127.0.0.1/mq", "db", "stats"]

    assert main(argv) == 2

    assert capsys.readouterr().err.startswith("batonctl: invalid PostgreSQL schema name 'Bad-Name'")


# --- what each command asks of the store, and prints -----------------------------------------


def test_create_in_an_empty_store(stores: Stores, capsys: pytest.CaptureFixture[str]) -> None:
    """imqdbmgr create tbl: "Create persistent store schema for existing database"; batonctl
    reads first, without the lock, then creates under the lock and never migrates."""
    stores.store.found = 0

    assert main(["db", "create"]) == 0

    assert capsys.readouterr().out == f"created schema version {SCHEMA_VERSION} in fake://store\n"
    assert stores.store.opens == [
        {"create": False, "migrate": False, "lock": False, "replace_lost": True},
        {"create": True, "migrate": False, "lock": True, "replace_lost": True},
    ]
    assert stores.store.calls == ["open", "close", "open", "close"]


def test_create_on_a_current_schema_is_reported_not_an_error(
    stores: Stores, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["db", "create"]) == 0

    assert capsys.readouterr().out == (
        f"fake://store already holds schema version {SCHEMA_VERSION}: nothing to do\n"
    )


def test_create_on_an_older_schema_points_to_upgrade(
    stores: Stores, capsys: pytest.CaptureFixture[str]
) -> None:
    stores.store.found, stores.store.creates = SCHEMA_VERSION - 1, False

    assert main(["db", "create"]) == 1

    err = capsys.readouterr().err
    assert err.startswith("batonctl: cannot create the schema: fake://store already holds")
    assert err.endswith("run `batonctl db upgrade`\n")


@pytest.mark.parametrize(
    ("upgraded_from", "expected"),
    [
        (SCHEMA_VERSION, f"schema is current ({SCHEMA_VERSION})\n"),
        (-7, f"schema upgraded from -7 to {SCHEMA_VERSION}\n"),
    ],
)
def test_upgrade(
    upgraded_from: int, expected: str, stores: Stores, capsys: pytest.CaptureFixture[str]
) -> None:
    """imqdbmgr upgrade; the brief: "schema upgraded from N to M" or "schema is current (M)"."""
    stores.store.upgraded_from = upgraded_from

    assert main(["db", "upgrade"]) == 0

    assert capsys.readouterr().out == expected
    assert stores.store.opens == [
        {"create": False, "migrate": False, "lock": True, "replace_lost": False}
    ]
    assert stores.store.calls == ["open", "upgrade", "close"]


def test_upgrade_of_an_empty_store_points_to_create(
    stores: Stores, capsys: pytest.CaptureFixture[str]
) -> None:
    stores.store.version = 0

    assert main(["db", "upgrade"]) == 1

    assert capsys.readouterr().err == (
        "batonctl: cannot upgrade the schema: fake://store holds no BatonMQ store: run "
        "`batonctl db create`\n"
    )
    assert "upgrade" not in stores.store.calls


def test_backup_reads_without_the_lock_and_summarises_the_manifest(
    stores: Stores, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Backup works while a broker runs: it opens the store without the lock."""
    assert main(["db", "backup", "--dir", str(tmp_path / "new" / "backup")]) == 0

    assert capsys.readouterr().out == (
        f"backed up fake://store to {tmp_path / 'new' / 'backup'}: 40 messages, 50 queue "
        "entries (schema version 1)\n"
    )
    assert stores.store.opens == [
        {"create": False, "migrate": False, "lock": False, "replace_lost": False}
    ]
    assert stores.store.calls == ["open", "backup", "close"]


@pytest.mark.parametrize("target", ["non-empty", "file"])
def test_backup_refuses_a_non_empty_directory_before_opening_the_store(
    target: str, stores: Stores, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "backup"
    if target == "file":
        directory.write_text("not a directory")
    else:
        directory.mkdir()
        (directory / "old").write_text("x")

    assert main(["db", "backup", "--dir", str(directory)]) == 1

    assert capsys.readouterr().err == (
        f"batonctl: backup failed: {directory} is not an empty directory: a backup needs an "
        "empty or new one\n"
    )
    assert stores.store.calls == []


def test_restore_takes_the_lock_and_reports_what_it_restored(
    stores: Stores, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = with_backup(tmp_path)

    assert main(["db", "restore", "--dir", str(directory)]) == 0

    assert capsys.readouterr().out == (
        f"restored fake://store from {directory}: 40 messages, 50 queue entries\n"
    )
    assert stores.store.opens == [
        {"create": True, "migrate": True, "lock": True, "replace_lost": True}
    ]
    assert stores.store.calls == ["open", "restore", "stats", "close"]


def test_restore_refuses_a_directory_that_is_not_a_backup(
    stores: Stores, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["db", "restore", "--dir", str(tmp_path)]) == 1

    assert capsys.readouterr().err == (
        f"batonctl: restore failed: {tmp_path} is not a BatonMQ backup (it has no manifest.json)\n"
    )
    assert stores.store.calls == []


def test_stats_prints_aligned_name_value_lines(
    stores: Stores, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["db", "stats"]) == 0

    assert capsys.readouterr().out == (
        "kind:           fake\n"
        "location:       fake://store\n"
        f"schema_version: {SCHEMA_VERSION}\n"
        "broker_id:      batonmq\n"
        "exchanges:      1\n"
        "queues:         2\n"
        "bindings:       3\n"
        "messages:       40\n"
        "entries:        50\n"
        "message_bytes:  6000\n"
        "quarantined:    7\n"
    )
    assert stores.store.opens == [
        {"create": False, "migrate": False, "lock": False, "replace_lost": False}
    ]


def test_stats_json(stores: Stores, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["db", "stats", "--json"]) == 0

    assert json.loads(capsys.readouterr().out) == {
        "kind": "fake",
        "location": "fake://store",
        "schema_version": SCHEMA_VERSION,
        "broker_id": "batonmq",
        "exchanges": 1,
        "queues": 2,
        "bindings": 3,
        "messages": 40,
        "entries": 50,
        "message_bytes": 6000,
        "quarantined": 7,
    }


# --- failures: "batonctl: <what failed>: <reason>", exit status 1, never a traceback --------------


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(
    ("error", "suffix"),
    [
        pytest.param(StoreError("the disk is full"), "", id="StoreError"),
        pytest.param(StoreUnavailable("cannot connect: refused"), "", id="StoreUnavailable"),
        pytest.param(
            StoreLocked("the store is locked by another running broker (pid 7)"),
            "; stop the broker first",
            id="StoreLocked",
        ),
        pytest.param(StoreCorrupt("the file is not a BatonMQ store"), "", id="StoreCorrupt"),
        pytest.param(
            SchemaTooNew("schema version 999 is newer than this BatonMQ's"),
            "; upgrade BatonMQ to use this store",
            id="SchemaTooNew",
        ),
        pytest.param(
            SchemaTooOld("schema version 0: run `batonctl db upgrade`"), "", id="SchemaTooOld"
        ),
    ],
)
@pytest.mark.parametrize("step", ["open", "work"])
def test_every_store_error_is_one_line_and_exit_1(
    command: str,
    error: StoreError,
    suffix: str,
    step: str,
    stores: Stores,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The brief: every StoreError subclass -> one line on stderr, "batonctl: <what failed>:
    <reason>", and exit status 1, whether opening the store or the work itself fails; a store
    that was opened is closed again."""
    if command == "restore":
        with_backup(tmp_path)
    work = {"create": "lock", "upgrade": "upgrade", "backup": "backup", "restore": "restore"}
    stores.store.fail[work.get(command, "stats") if step == "work" else "open"] = error

    assert main(argv_for(command, tmp_path)) == 1

    captured = capsys.readouterr()
    assert captured.err == f"batonctl: {WHAT_FAILED[command]}: {error}{suffix}\n"
    assert captured.out == ""
    assert not stores.store.is_open


def test_a_file_that_cannot_be_written_is_one_line_and_exit_1(
    stores: Stores, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store may let an OSError through (the PostgreSQL store writing its backup files)."""
    stores.store.fail["backup"] = PermissionError(13, "Permission denied", "/backups/b")

    assert main(["db", "backup", "--dir", str(tmp_path / "b")]) == 1

    assert capsys.readouterr().err == "batonctl: backup failed: /backups/b: Permission denied\n"
    assert not stores.store.is_open


def test_an_error_without_text_is_named(stores: Stores, capsys: pytest.CaptureFixture[str]) -> None:
    stores.store.fail["stats"] = StoreError()

    assert main(["db", "stats"]) == 1

    assert capsys.readouterr().err == "batonctl: cannot read the store's statistics: StoreError\n"


def test_interrupted(stores: Stores, capsys: pytest.CaptureFixture[str]) -> None:
    stores.store.fail["stats"] = KeyboardInterrupt()

    assert main(["db", "stats"]) == 130

    assert capsys.readouterr().err == "batonctl: interrupted\n"
    assert not stores.store.is_open


def test_sqlite_without_a_file_says_where_it_looked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Reading commands never create the file; the error names it (the real SQLite store)."""
    for argv in (["db", "stats"], ["db", "upgrade"], ["db", "backup", "--dir", "b"]):
        assert main(["--data-dir", str(tmp_path), *argv]) == 1
        err = capsys.readouterr().err
        assert f"there is no store at {tmp_path / 'batonmq.sqlite3'}" in err
    assert list(tmp_path.iterdir()) == []


# --- the installed commands ------------------------------------------------------------------


def test_python_dash_m_reports_a_config_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATONMQ")}

    result = subprocess.run(
        [sys.executable, "-m", "batonmq.cli.ctl", "--store", "mysql", "db", "stats"],
        capture_output=True, text=True, env=env, timeout=60, check=False, cwd=tmp_path,
    )  # fmt: skip

    assert result.returncode == 2
    assert result.stderr == (
        "batonctl: --store: persist.store: expected one of 'sqlite', 'postgres', got 'mysql'\n"
    )


def test_the_batonctl_entry_point_is_installed() -> None:
    """pyproject.toml: batonctl = "batonmq.cli.ctl:main"."""
    result = subprocess.run(
        [str(Path(sys.executable).parent / "batonctl"), "--version"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip

    assert (result.returncode, result.stdout) == (0, f"batonctl {__version__}\n")
