"""Importing Qpid password files (seed §2.1.1 "Available Password file formats")."""

from __future__ import annotations

import pytest

from batonmq.security.password_files import (
    PasswordFileError,
    PasswordFileFormat,
    parse_password_file,
)
from batonmq.security.passwords import CredentialKind, ScryptParams

FAST = ScryptParams(n=16, r=1, p=1)
PLAIN = PasswordFileFormat.PLAIN
BASE64_MD5 = PasswordFileFormat.BASE64_MD5


def parse(text, file_format=PLAIN):
    return parse_password_file(text, file_format, source="passwd", params=FAST)


def test_the_seed_plain_example():
    """§2.1.1.1: "The plain file has the following format" (the example, verbatim)."""
    text = (
        "# Plain password authentication file.\n"
        "# default name : passwd\n"
        "# Format <username>:<password>\n"
        "#e.g.\n"
        "martin:password\n"
    )
    [entry] = parse(text)
    assert entry.username == "martin"
    assert entry.line_number == 5
    assert entry.credential.kind is CredentialKind.SCRYPT
    assert entry.credential.weak is False
    assert entry.credential.verify("password") is True
    assert entry.credential.verify("Password") is False


def test_the_seed_base64md5_example():
    """§2.1.1.3: "The password field contains the MD5 Hash of the users password encoded in
    Base64." The seed's example line is martin's "password"."""
    text = (
        "# Base64MD5 password authentication file\n"
        "# default name : qpid.passwd\n"
        "# Format <username>:<Base64 Encoded MD5 hash of the users password>\n"
        "#e.g.\n"
        "martin:X03MO1qnZdYdgyfeuILPmQ==\n"
    )
    [entry] = parse(text, BASE64_MD5)
    assert entry.username == "martin"
    assert entry.credential.kind is CredentialKind.LEGACY_MD5
    assert entry.credential.weak is True, "the CLI warns that MD5 is weak"
    assert entry.credential.encode() == "md5$X03MO1qnZdYdgyfeuILPmQ=="
    assert entry.credential.verify("password", params=FAST) is True


def test_a_second_colon_ends_a_plain_password():
    """§2.1.1.1: "The password, therefore, cannot contain a ':' colon, but this can be used to
    delimit the password."""
    [entry] = parse("martin:pass:comment after the password\n")
    assert entry.credential.verify("pass") is True
    assert entry.credential.verify("pass:comment after the password") is False


def test_a_plain_password_is_everything_right_of_the_colon():
    """§2.1.1.1: "the password is taken to be everything to the right of the ':'(colon)", spaces
    and '#' included."""
    [entry] = parse("martin: pass word #1 \n")
    assert entry.credential.verify(" pass word #1 ") is True


def test_comments_and_blank_lines_are_skipped():
    """§2.1.1.1: "Lines starting with a '#' are treated as comments." """
    entries = parse("\n# a:b\n   \n  # indented: comment\nalice:a\r\n\r\nbob:b")
    assert [(entry.username, entry.line_number) for entry in entries] == [("alice", 5), ("bob", 7)]


def test_lines_end_only_at_newline_and_carriage_return():
    """A form feed is part of the password, as Qpid's line reader saw it."""
    [entry] = parse("martin:pass\x0cword\n")
    assert entry.credential.verify("pass\x0cword") is True


@pytest.mark.parametrize(
    ("text", "line_number", "reason"),
    [
        ("alice:a\nno colon here\n", 2, "no ':'"),
        ("alice:a\n\n:password\n", 3, "empty username"),
        ("alice:\n", 1, "empty password"),
        (" alice:a\n", 1, "whitespace"),
        ("alice:a\nbob:b\nalice:c\n", 3, "already defined on line 1"),
    ],
)
def test_a_malformed_plain_line_names_file_and_line(text, line_number, reason):
    with pytest.raises(PasswordFileError) as raised:
        parse(text)
    assert raised.value.source == "passwd"
    assert raised.value.line_number == line_number
    assert reason in raised.value.reason
    assert str(raised.value).startswith(f"passwd:{line_number}: ")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("martin:pass word!\n", "not Base64"),
        ("martin:AAAA\n", "16 bytes"),
        ("martin:X03MO1qnZdYdgyfeuILPmQ==:x\n", "cannot contain ':'"),
        ("martin\n", "no ':'"),
    ],
)
def test_a_malformed_base64md5_line_names_file_and_line(text, reason):
    with pytest.raises(PasswordFileError) as raised:
        parse("# header\n" + text, BASE64_MD5)
    assert raised.value.line_number == 2
    assert reason in raised.value.reason


def test_surrounding_spaces_around_a_base64_hash_are_ignored():
    [entry] = parse("martin:X03MO1qnZdYdgyfeuILPmQ== \n", BASE64_MD5)
    assert entry.credential.verify("password", params=FAST) is True


def test_an_empty_file_defines_no_users():
    assert parse("") == []
    assert parse("# only comments\n\n") == []
