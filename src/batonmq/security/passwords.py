"""Password hashing, and the stored `Credential` a user logs in against.

New passwords are hashed with salted scrypt (`hashlib.scrypt`, so no new dependency). A credential
may also be a legacy MD5 imported from a Qpid Base64MD5 password file (seed §2.1.1.3: "The
password field contains the MD5 Hash of the users password encoded in Base64"): the password is
unknown, so it cannot become scrypt until its owner next logs in, when `needs_upgrade` says so.

Encoded forms, as the users table stores them (`Credential.encode`):

    scrypt$n=16384,r=8,p=1$<base64 salt>$<base64 hash>
    md5$<base64 MD5 of the password>

Base64 is the standard alphabet with padding, in which neither '$' nor ',' occurs.

Hashing is deliberately slow (about 40 ms at the current parameters): callers on an event loop run
it in a thread pool, whose size also bounds the memory scrypt takes (16 MiB per hash).
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass


class MalformedHashError(ValueError):
    """An encoded password hash or credential is not in one of the forms above."""


#: Ceiling on what a stored hash may ask for, so a corrupt row cannot make a login allocate
#: gigabytes (and hashlib refuses a maxmem above 2 GiB anyway).
MAX_SCRYPT_MEMORY = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ScryptParams:
    """scrypt's cost parameters: `n` (CPU and memory, a power of two), `r` (block size) and `p`
    (parallelism). Memory needed is about 128 * r * n bytes."""

    n: int
    r: int
    p: int

    def __post_init__(self) -> None:
        if self.n < 2 or self.n & (self.n - 1) or self.r < 1 or self.p < 1:
            raise ValueError(f"scrypt needs n a power of two above 1, r >= 1, p >= 1: {self}")
        if self.memory_bytes > MAX_SCRYPT_MEMORY:
            raise ValueError(f"scrypt parameters need more than {MAX_SCRYPT_MEMORY} bytes: {self}")

    @property
    def memory_bytes(self) -> int:
        # OpenSSL's EVP_PBE_scrypt refuses unless maxmem covers p * 128 * r + 128 * r * (n + 2).
        return 128 * self.r * (self.n + 2 + self.p)


#: Percival's parameters for interactive logins (16 MiB, ~40 ms). OWASP's n=2**17 would take
#: 128 MiB and ~300 ms per login, which turns a flood of bad logins into a memory exhaustion.
SCRYPT_PARAMS = ScryptParams(n=2**14, r=8, p=1)
SALT_BYTES = 16
HASH_BYTES = 32

_SCRYPT_HASH = re.compile(
    r"scrypt\$n=(?P<n>\d{1,10}),r=(?P<r>\d{1,4}),p=(?P<p>\d{1,4})"
    r"\$(?P<salt>[A-Za-z0-9+/]+={0,2})\$(?P<hash>[A-Za-z0-9+/]+={0,2})"
)
_MIN_STORED_SALT_BYTES = 8
_MIN_STORED_HASH_BYTES = 16
# Salt for the work done on behalf of an unknown user; its output is thrown away.
_UNKNOWN_USER_SALT = bytes(SALT_BYTES)


def _utf8(password: str) -> bytes:
    # surrogatepass: a lone surrogate from a client's field table must fail the compare, not raise.
    return password.encode("utf-8", "surrogatepass")


def _b64encode(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _b64decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error as error:
        raise MalformedHashError(f"{what} is not Base64: {error}") from error


def _scrypt(password: str, salt: bytes, params: ScryptParams, length: int) -> bytes:
    return hashlib.scrypt(
        _utf8(password),
        salt=salt,
        n=params.n,
        r=params.r,
        p=params.p,
        maxmem=params.memory_bytes,
        dklen=length,
    )


def _parse_scrypt(encoded: str) -> tuple[ScryptParams, bytes, bytes]:
    match = _SCRYPT_HASH.fullmatch(encoded)
    if match is None:
        raise MalformedHashError("not a 'scrypt$n=N,r=R,p=P$<salt>$<hash>' password hash")
    try:
        params = ScryptParams(n=int(match["n"]), r=int(match["r"]), p=int(match["p"]))
    except ValueError as error:
        raise MalformedHashError(str(error)) from error
    salt = _b64decode(match["salt"], "scrypt salt")
    digest = _b64decode(match["hash"], "scrypt hash")
    if len(salt) < _MIN_STORED_SALT_BYTES or len(digest) < _MIN_STORED_HASH_BYTES:
        raise MalformedHashError(
            f"scrypt salt or hash too short ({len(salt)} and {len(digest)} bytes; at least "
            f"{_MIN_STORED_SALT_BYTES} and {_MIN_STORED_HASH_BYTES})"
        )
    return params, salt, digest


def hash_password(password: str, *, params: ScryptParams = SCRYPT_PARAMS) -> str:
    """A fresh salted scrypt hash of `password`, in the encoded form above."""
    salt = secrets.token_bytes(SALT_BYTES)
    digest = _scrypt(password, salt, params, HASH_BYTES)
    return f"scrypt$n={params.n},r={params.r},p={params.p}${_b64encode(salt)}${_b64encode(digest)}"


def verify_password(password: str, encoded: str) -> bool:
    """Whether `password` hashes to `encoded`, compared in constant time. MalformedHashError if
    `encoded` is not a scrypt hash."""
    params, salt, expected = _parse_scrypt(encoded)
    return hmac.compare_digest(_scrypt(password, salt, params, len(expected)), expected)


def needs_rehash(encoded: str, *, params: ScryptParams = SCRYPT_PARAMS) -> bool:
    """Whether `encoded` was hashed with any parameter below `params`: rehash it at the next
    successful login, when the password is known."""
    stored, _salt, _digest = _parse_scrypt(encoded)
    return stored.n < params.n or stored.r < params.r or stored.p < params.p


def verify_unknown_user(password: str, *, params: ScryptParams = SCRYPT_PARAMS) -> bool:
    """False, after the same scrypt work as verifying a real user's password: a login naming an
    unknown user takes as long as one with a wrong password, so timing does not tell which
    usernames exist."""
    _scrypt(password, _UNKNOWN_USER_SALT, params, HASH_BYTES)
    return False


class CredentialKind(enum.Enum):
    SCRYPT = "scrypt"
    #: Imported from a Qpid Base64MD5 file; weak (unsalted and fast), replaced at the next login.
    LEGACY_MD5 = "md5"


_MD5_BYTES = 16
_LEGACY_MD5_PREFIX = f"{CredentialKind.LEGACY_MD5.value}$"


def _legacy_md5_digest(base64_md5: str) -> bytes:
    digest = _b64decode(base64_md5, "Base64 MD5")
    if len(digest) != _MD5_BYTES:
        raise MalformedHashError(f"an MD5 hash is {_MD5_BYTES} bytes, not {len(digest)}")
    return digest


def _legacy_md5_candidates(password: str) -> tuple[bytes, bytes]:
    # The qpid-passwd tool hashed the password's bytes (UTF-8); the Qpid broker, when it set a
    # password itself, hashed each character cast to a byte (HashedUser.setPassword). The two
    # agree for ASCII; a file may hold either, so both are accepted.
    low_bytes = bytes(ord(character) & 0xFF for character in password)
    return (
        hashlib.md5(_utf8(password), usedforsecurity=False).digest(),
        hashlib.md5(low_bytes, usedforsecurity=False).digest(),
    )


@dataclass(frozen=True, slots=True)
class Credential:
    """What a user's password is checked against.

    `hashed` is, for SCRYPT, a `hash_password` string; for LEGACY_MD5, the Base64 MD5 exactly as
    a Qpid Base64MD5 file holds it. Construction checks it, raising MalformedHashError, so every
    Credential can `verify`.
    """

    kind: CredentialKind
    hashed: str

    def __post_init__(self) -> None:
        if self.kind is CredentialKind.SCRYPT:
            _parse_scrypt(self.hashed)
        else:
            _legacy_md5_digest(self.hashed)

    @classmethod
    def from_password(cls, password: str, *, params: ScryptParams = SCRYPT_PARAMS) -> Credential:
        return cls(CredentialKind.SCRYPT, hash_password(password, params=params))

    @classmethod
    def decode(cls, encoded: str) -> Credential:
        """The credential `encode` wrote; MalformedHashError if `encoded` is neither form."""
        if encoded.startswith(_LEGACY_MD5_PREFIX):
            return cls(CredentialKind.LEGACY_MD5, encoded.removeprefix(_LEGACY_MD5_PREFIX))
        return cls(CredentialKind.SCRYPT, encoded)

    def encode(self) -> str:
        if self.kind is CredentialKind.SCRYPT:
            return self.hashed
        return _LEGACY_MD5_PREFIX + self.hashed

    @property
    def weak(self) -> bool:
        """MD5 is weak: unsalted, and fast enough to guess billions of passwords a second."""
        return self.kind is CredentialKind.LEGACY_MD5

    def needs_upgrade(self, *, params: ScryptParams = SCRYPT_PARAMS) -> bool:
        """Whether to store `Credential.from_password` after this password verified."""
        return self.weak or needs_rehash(self.hashed, params=params)

    def verify(self, password: str, *, params: ScryptParams = SCRYPT_PARAMS) -> bool:
        """Whether `password` is this credential's, compared in constant time.

        A legacy MD5 check also does an unknown user's scrypt work at `params`, so a legacy user
        does not answer faster than a current one and stand out by timing.
        """
        if self.kind is CredentialKind.SCRYPT:
            return verify_password(password, self.hashed)
        verify_unknown_user(password, params=params)
        expected = _legacy_md5_digest(self.hashed)
        # Both compared on every call, so which encoding matched does not show in the timing.
        matches = [
            hmac.compare_digest(candidate, expected)
            for candidate in _legacy_md5_candidates(password)
        ]
        return any(matches)
