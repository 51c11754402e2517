"""``batonctl user``: the users who may log in (Qpid manual §2.1 "Add New Users").

    batonctl user add NAME [--password PW | --password-stdin] [--tags TAGS]
    batonctl user passwd NAME [--password PW | --password-stdin] [--tags TAGS]
    batonctl user tags NAME [TAGS]
    batonctl user delete NAME
    batonctl user list
    batonctl user import FILE --format plain|base64md5

Users live in the broker's store, with salted scrypt password hashes (never the password). With
a data directory (--data-dir, --config ...), the commands work on the store while no broker runs
on it (they take its lock, as `batonctl db upgrade` does); a broker reads its users when it
starts. Without one, or with an option of the running broker's (--url, --user ...), add, passwd,
tags and delete go to the running broker over its HTTP API (as an administrator), in force at
once. `import` reads the password files of
the seed (§2.1.1): plain `user:password` lines, hashed as they are imported, or Base64MD5 ones,
which are kept as they are (MD5 is weak: each is replaced by scrypt at the user's next login).
Without --password or --password-stdin the password is asked for on the terminal, twice.
Tags are RabbitMQ's (administrator, monitoring, policymaker, management; comma- or
space-separated): they decide what the user may do over the management HTTP API, and a user
without one may not use it at all. `passwd` without --tags keeps the user's tags; `tags NAME`
alone removes them. A user added may use no virtual host until given permissions there
(`batonctl permissions set`), as in RabbitMQ.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from batonmq.cli.live import accounts
from batonmq.cli.passwords import add_password_options, check_user_name, new_password
from batonmq.cli.storecommand import (
    PROG,
    CommandFailed,
    opened,
    require_store_file,
    run_on_store,
)
from batonmq.config import Config
from batonmq.management.access import parse_tags
from batonmq.security.password_files import (
    PasswordFileError,
    PasswordFileFormat,
    parse_password_file,
)
from batonmq.security.passwords import Credential, MalformedHashError
from batonmq.store.base import Store, StoredUser, WriteBatch


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``user`` group and its commands to `groups` (see `batonmq.cli.ctl`)."""
    group = groups.add_parser(
        "user",
        help="users who may log in: add, passwd, tags, delete, list, import",
        description=__doc__.split("\n\n", 2)[2].strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = group.add_subparsers(
        title="commands", dest="command", metavar="COMMAND", required=True
    )
    for name, help_text, handler, live, what in (
        ("add", "add a user", _add, accounts.add_user, "cannot add user '{name}'"),
        (
            "passwd",
            "set a user's password",
            _passwd,
            accounts.change_password,
            "cannot change the password of user '{name}'",
        ),
    ):
        command = commands.add_parser(
            name, help=help_text, description=f"{help_text.capitalize()}."
        )
        command.add_argument("name", metavar="NAME")
        add_password_options(command)
        command.add_argument(
            "--tags",
            metavar="TAGS",
            help="management tags, comma-separated: administrator, monitoring, policymaker, "
            "management",
        )
        command.set_defaults(handler=handler, live=live, what=what)
    tagging = commands.add_parser(
        "tags",
        help="set a user's management tags",
        description="Set a user's management tags (none: the user may not use the HTTP API).",
    )
    tagging.add_argument("name", metavar="NAME")
    tagging.add_argument("tags", metavar="TAGS", nargs="*")
    tagging.set_defaults(
        handler=_set_tags, live=accounts.set_tags, what="cannot set the tags of user '{name}'"
    )
    delete = commands.add_parser("delete", help="delete a user", description="Delete a user.")
    delete.add_argument("name", metavar="NAME")
    delete.set_defaults(
        handler=_delete, live=accounts.delete_user, what="cannot delete user '{name}'"
    )
    listing = commands.add_parser("list", help="list the users", description="List the users.")
    listing.set_defaults(handler=_list)
    importing = commands.add_parser(
        "import",
        help="add the users of a Qpid password file",
        description="Add the users of a password file of the seed's formats (§2.1.1).",
    )
    importing.add_argument("file", metavar="FILE", type=Path)
    importing.add_argument(
        "--format",
        required=True,
        choices=[file_format.value for file_format in PasswordFileFormat],
        help="plain: user:password lines; base64md5: user:base64(md5(password)) lines",
    )
    importing.add_argument(
        "--replace", action="store_true", help="replace the passwords of users that exist"
    )
    importing.set_defaults(handler=_import)


async def _names(store: Store) -> set[str]:
    return {user.name for user in await store.users()}


async def _user(store: Store, name: str) -> StoredUser | None:
    return next((user for user in await store.users() if user.name == name), None)


def _tags(text: str | None) -> tuple[str, ...] | None:
    return None if text is None else tuple(sorted(parse_tags(text)))


def _add(args: argparse.Namespace, config: Config) -> int:
    return _set_password(args, config, adding=True)


def _passwd(args: argparse.Namespace, config: Config) -> int:
    return _set_password(args, config, adding=False)


def _set_password(args: argparse.Namespace, config: Config, *, adding: bool) -> int:
    """`user add` (the user must be new) and `user passwd` (the user must exist)."""
    name: str = args.name
    credential = _new_credential(name, args)
    tags = _tags(args.tags)

    async def set_password(store: Store) -> str:
        async with opened(store, create=adding, migrate=True, lock=True, catalogue_only=True):
            existing = await _user(store, name)
            if adding and existing is not None:
                raise CommandFailed(f"user '{name}' exists: use `batonctl user passwd`")
            if existing is None and not adding:
                raise CommandFailed(f"there is no user '{name}'")
            kept = existing.tags if existing is not None else ()
            user = StoredUser(name, credential.encode(), kept if tags is None else tags)
            await store.commit(WriteBatch(users_put=[user]))
        return f"added user '{name}'" if adding else f"changed the password of user '{name}'"

    what = f"cannot add user '{name}'" if adding else f"cannot change the password of user '{name}'"
    return run_on_store(config, what, set_password)


def _new_credential(name: str, args: argparse.Namespace) -> Credential:
    """The scrypt credential of the password given for `name` (CommandFailed when the name or
    the password will not do)."""
    check_user_name(name)
    return Credential.from_password(new_password(args))


def _set_tags(args: argparse.Namespace, config: Config) -> int:
    name: str = args.name
    tags = _tags(" ".join(args.tags)) or ()

    async def set_tags(store: Store) -> str:
        async with opened(store, create=False, migrate=True, lock=True, catalogue_only=True):
            existing = await _user(store, name)
            if existing is None:
                raise CommandFailed(f"there is no user '{name}'")
            user = StoredUser(name, existing.credential, tags)
            await store.commit(WriteBatch(users_put=[user]))
        return f"set the tags of user '{name}' to [{', '.join(tags)}]"

    return run_on_store(config, f"cannot set the tags of user '{name}'", set_tags)


def _delete(args: argparse.Namespace, config: Config) -> int:
    name: str = args.name

    async def delete(store: Store) -> str:
        async with opened(store, create=False, migrate=True, lock=True, catalogue_only=True):
            if name not in await _names(store):
                raise CommandFailed(f"there is no user '{name}'")
            await store.commit(WriteBatch(users_deleted=[name]))
        return f"deleted user '{name}'"

    return run_on_store(config, f"cannot delete user '{name}'", delete)


def _list(args: argparse.Namespace, config: Config) -> int:
    async def listing(store: Store) -> str:
        require_store_file(store, config)
        async with opened(store, create=False, migrate=False, lock=False):
            users = await store.users()
        return "\n".join(f"{user.name}\t{_kind(user)}\t[{', '.join(user.tags)}]" for user in users)

    return run_on_store(config, "cannot list the users", listing)


def _kind(user: StoredUser) -> str:
    try:
        credential = Credential.decode(user.credential)
    except MalformedHashError:
        return "unusable (bad stored credential)"
    return "md5 (weak: replaced at next login)" if credential.weak else credential.kind.value


def _import(args: argparse.Namespace, config: Config) -> int:
    path: Path = args.file
    replace: bool = args.replace
    try:
        entries = parse_password_file(
            path.read_text(encoding="utf-8"), PasswordFileFormat(args.format), source=str(path)
        )
    except (OSError, UnicodeDecodeError, PasswordFileError) as error:
        raise CommandFailed(f"cannot import {path}: {error}") from None

    async def import_users(store: Store) -> str:
        async with opened(store, create=True, migrate=True, lock=True, catalogue_only=True):
            tags = {user.name: user.tags for user in await store.users()}
            existing = tags.keys() & {entry.username for entry in entries}
            if existing and not replace:
                raise CommandFailed(
                    f"users exist already: {', '.join(sorted(existing))} (--replace replaces "
                    "their passwords)"
                )
            await store.commit(
                WriteBatch(
                    users_put=[
                        StoredUser(
                            entry.username,
                            entry.credential.encode(),
                            tags.get(entry.username, ()),
                        )
                        for entry in entries
                    ]
                )
            )
        if any(entry.credential.weak for entry in entries):
            print(
                f"{PROG}: warning: MD5 password hashes are weak; each is replaced by scrypt at "
                "the user's next login",
                file=sys.stderr,
            )
        return f"imported {len(entries)} users from {path}"

    return run_on_store(config, f"cannot import {path}", import_users)
