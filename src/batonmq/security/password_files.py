"""Importing users from Qpid's two password file formats (seed §2.1.1), parsed from text.

Plain (§2.1.1.1), `<username>:<password>`: "the password is taken to be everything to the right
of the ':'(colon). The password, therefore, cannot contain a ':' colon, but this can be used to
delimit the password." So the password ends at a second colon, and what follows is ignored.

Base64MD5 (§2.1.1.3), `<username>:<Base64 Encoded MD5 hash of the users password>`: the
password is unknown, so the user gets a legacy MD5 `Credential` (weak; upgraded to scrypt at the
next successful login).

In both, "Lines starting with a '#' are treated as comments"; blank lines are skipped too, and a
'#' after leading spaces still starts a comment. Where Qpid silently skipped a line it could not
read, the import refuses the file, naming the file and the 1-based line: half an import is worse
than none. A username given twice is refused for the same reason (Qpid kept the last).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from batonmq.security.passwords import (
    SCRYPT_PARAMS,
    Credential,
    CredentialKind,
    MalformedHashError,
    ScryptParams,
)


class PasswordFileFormat(enum.Enum):
    PLAIN = "plain"
    BASE64_MD5 = "base64md5"


class PasswordFileError(ValueError):
    """A line of a password file does not parse; names the file and the 1-based line."""

    def __init__(self, source: str, line_number: int, reason: str) -> None:
        super().__init__(f"{source}:{line_number}: {reason}")
        self.source = source
        self.line_number = line_number
        self.reason = reason


class _LineError(ValueError):
    """Why one line does not parse; PasswordFileError adds where."""


@dataclass(frozen=True, slots=True)
class PasswordFileEntry:
    username: str
    credential: Credential
    line_number: int


# Line ends as Qpid's BufferedReader.readLine saw them; str.splitlines would also split a plain
# password at a form feed or U+2028.
_LINE_END = re.compile(r"\r\n?|\n")


def _credential(file_format: PasswordFileFormat, secret: str, params: ScryptParams) -> Credential:
    if file_format is PasswordFileFormat.PLAIN:
        return Credential.from_password(secret, params=params)
    return Credential(CredentialKind.LEGACY_MD5, secret)


def _split(file_format: PasswordFileFormat, line: str) -> tuple[str, str]:
    username, colon, rest = line.partition(":")
    if not colon:
        raise _LineError("no ':' between username and password")
    if file_format is PasswordFileFormat.PLAIN:
        secret = rest.partition(":")[0]
    elif ":" in rest:
        raise _LineError("a Base64 MD5 hash cannot contain ':'")
    else:
        secret = rest.strip()
    if not username:
        raise _LineError("empty username")
    if username != username.strip():
        raise _LineError(f"username {username!r} has leading or trailing whitespace")
    if not secret:
        raise _LineError("empty password")
    return username, secret


def parse_password_file(
    text: str,
    file_format: PasswordFileFormat,
    *,
    source: str,
    params: ScryptParams = SCRYPT_PARAMS,
) -> list[PasswordFileEntry]:
    """The users `text` (the file's contents) defines, in file order. `source` names the file in
    errors; `params` hashes plain passwords. PasswordFileError on the first bad line."""
    entries: list[PasswordFileEntry] = []
    first_line_of: dict[str, int] = {}
    for line_number, line in enumerate(_LINE_END.split(text), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            username, secret = _split(file_format, line)
            if username in first_line_of:
                raise _LineError(
                    f"user {username!r} is already defined on line {first_line_of[username]}"
                )
            credential = _credential(file_format, secret, params)
        except (_LineError, MalformedHashError) as error:
            raise PasswordFileError(source, line_number, str(error)) from error
        first_line_of[username] = line_number
        entries.append(PasswordFileEntry(username, credential, line_number))
    return entries
