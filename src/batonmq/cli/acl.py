"""``batonctl acl``: check the ACL files, and have the running broker reload them.

    batonctl acl check
    batonctl acl reload

Both read the files the configuration names (`[acl] file` and the per-virtual-host files in
`[acl] vhost_dir`, Qpid manual §2.2). `check` reports the first error as FILE:LINE:COLUMN. `reload`
checks first and, only if every file is good, sends SIGHUP to the broker running on the data
directory (its pid is in `batonmq.pid` there), which reloads the rules without a restart; the
broker logs "ACL reloaded". A broker that finds a file broken by then keeps its old rules.
"""

from __future__ import annotations

import argparse
import os
import signal

from batonmq.cli.storecommand import CommandFailed
from batonmq.config import Config
from batonmq.engine.access import AccessControl
from batonmq.security.acl import AclError
from batonmq.server.pidfile import running_broker_pid


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``acl`` group and its commands to `groups` (see `batonmq.cli.ctl`)."""
    group = groups.add_parser(
        "acl",
        help="access control lists: check, reload",
        description=__doc__.split("\n\n", 2)[2].strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = group.add_subparsers(
        title="commands", dest="command", metavar="COMMAND", required=True
    )
    check = commands.add_parser(
        "check", help="check the ACL files", description="Check the ACL files."
    )
    check.set_defaults(handler=_check)
    reload = commands.add_parser(
        "reload",
        help="have the running broker reload the ACL files",
        description="Check the ACL files, then have the running broker reload them (SIGHUP).",
    )
    reload.set_defaults(handler=_reload)


def _checked(config: Config) -> str | None:
    """What is wrong with the ACL files (printed), or None when they are all good."""
    if config.acl.file is None and config.acl.vhost_dir is None:
        return "no ACL is configured ([acl] file, [acl] vhost_dir)"
    try:
        AccessControl.load(config.acl)
    except AclError as error:
        return str(error)
    return None


def _check(args: argparse.Namespace, config: Config) -> int:
    problem = _checked(config)
    if problem is not None:
        raise CommandFailed(problem)
    print("the ACL files are good")
    return 0


def _reload(args: argparse.Namespace, config: Config) -> int:
    problem = _checked(config)
    if problem is not None:
        raise CommandFailed(f"not reloaded: {problem}")
    pid = running_broker_pid(config.data_dir)
    if pid is None:
        raise CommandFailed(f"no broker is running on {config.data_dir}")
    os.kill(pid, signal.SIGHUP)
    print(f"asked the broker (pid {pid}) to reload the ACL files")
    return 0
