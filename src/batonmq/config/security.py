"""Settings of who may log in and what they may do."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from batonmq.config.checks import between, positive_finite, setting


@dataclass(frozen=True, slots=True)
class AuthConfig:
    #: The guest user may connect only from a loopback address (as RabbitMQ's loopback_users).
    guest_loopback_only: bool = setting(True)
    #: Failed logins of one user from one address within `failure_window` seconds that lock
    #: that user out from that address for `lockout` seconds; each failure also delays that
    #: user's next answer there (security/lockout.py has the rules).
    max_failures: int = setting(5, check=between(1))
    failure_window: float = setting(60.0, check=positive_finite)
    lockout: float = setting(300.0, check=positive_finite)


@dataclass(frozen=True, slots=True)
class AclConfig:
    """Access control lists in Qpid's syntax (Qpid manual §2.2). With neither file, any user who
    logs in may do anything in the virtual hosts that exist."""

    #: The broker-wide ACL file: every operation must be allowed by it.
    file: Path | None = field(default=None)
    #: A directory of per-virtual-host ACL files, named after the virtual host with "/" and other
    #: reserved characters %-encoded ("%2F.acl" for "/", "test.acl" for "test"): an operation in
    #: a virtual host that has one must be allowed by it too.
    vhost_dir: Path | None = field(default=None)
