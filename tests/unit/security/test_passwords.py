"""Salted scrypt hashes and the stored Credential (including the legacy MD5 of seed §2.1.1.3)."""

from __future__ import annotations

import base64
import hashlib
import re

import pytest

from batonmq.security.passwords import (
    SCRYPT_PARAMS,
    Credential,
    CredentialKind,
    MalformedHashError,
    ScryptParams,
    hash_password,
    needs_rehash,
    verify_password,
    verify_unknown_user,
)

FAST = ScryptParams(n=16, r=1, p=1)
FASTER = ScryptParams(n=8, r=1, p=1)


def test_a_hash_verifies_its_password_and_no_other():
    encoded = hash_password("s3cret", params=FAST)
    assert verify_password("s3cret", encoded) is True
    assert verify_password("s3cret ", encoded) is False
    assert verify_password("S3cret", encoded) is False
    assert verify_password("", encoded) is False


def test_the_encoding_is_self_describing_and_salted():
    first = hash_password("s3cret", params=FAST)
    second = hash_password("s3cret", params=FAST)
    match = re.fullmatch(r"scrypt\$n=16,r=1,p=1\$([^$]+)\$([^$]+)", first)
    assert match is not None
    assert len(base64.b64decode(match[1])) == 16
    assert len(base64.b64decode(match[2])) == 32
    assert first != second, "a fresh salt each time, so equal passwords do not look equal"


def test_the_default_parameters_are_the_current_ones():
    assert hash_password("pw").startswith("scrypt$n=16384,r=8,p=1$")
    assert ScryptParams(n=16384, r=8, p=1) == SCRYPT_PARAMS


def test_non_ascii_passwords_round_trip():
    encoded = hash_password("pâss wörd ✓", params=FAST)
    assert verify_password("pâss wörd ✓", encoded) is True
    assert verify_password("pass word ✓", encoded) is False


def test_a_lone_surrogate_fails_rather_than_raises():
    encoded = hash_password("pw", params=FAST)
    assert verify_password("\udc80", encoded) is False


def test_verification_matches_hashlib_scrypt():
    """The stored hash is plain scrypt of the UTF-8 password, so other tools can check it."""
    salt = bytes(range(16))
    digest = hashlib.scrypt(b"pw", salt=salt, n=16, r=1, p=1, dklen=32)
    salt_text, digest_text = base64.b64encode(salt).decode(), base64.b64encode(digest).decode()
    encoded = f"scrypt$n=16,r=1,p=1${salt_text}${digest_text}"
    assert verify_password("pw", encoded) is True


@pytest.mark.parametrize(
    "encoded",
    [
        "",
        "pw",
        "bcrypt$2b$12$abc",
        "scrypt$n=16,r=1,p=1$AAAAAAAAAAAAAAAAAAAAAA==",
        "scrypt$n=16,r=1$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAA==",
        "scrypt$n=15,r=1,p=1$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAA==",
        "scrypt$n=16,r=0,p=1$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAA==",
        "scrypt$n=16,r=1,p=1$AAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAA==",
        "scrypt$n=16,r=1,p=1$AAAA$AAAAAAAAAAAAAAAAAAAAAA==",
        "scrypt$n=16,r=1,p=1$AAAAAAAAAAAAAAAAAAAAAA==$AAAA",
        "scrypt$n=1073741824,r=8,p=1$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAA==",
        "scrypt$n=16,r=1,p=1$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAA==$",
    ],
)
def test_a_malformed_hash_raises_a_value_error(encoded):
    """Bad padding, short salt or hash, missing or invalid parameters, and a cost above the
    memory ceiling (a corrupt row must not make a login allocate gigabytes) are all refused."""
    with pytest.raises(MalformedHashError):
        verify_password("pw", encoded)


def test_malformed_hash_is_a_value_error():
    with pytest.raises(ValueError, match="not a 'scrypt"):
        verify_password("pw", "plain-text-password")


def test_needs_rehash_when_any_parameter_is_below_current():
    assert needs_rehash(hash_password("pw", params=FAST), params=FAST) is False
    assert needs_rehash(hash_password("pw", params=FASTER), params=FAST) is True
    assert needs_rehash(
        hash_password("pw", params=ScryptParams(16, 1, 1)), params=ScryptParams(16, 2, 1)
    )
    assert needs_rehash(
        hash_password("pw", params=ScryptParams(16, 1, 1)), params=ScryptParams(16, 1, 2)
    )
    assert needs_rehash(hash_password("pw", params=ScryptParams(32, 1, 1)), params=FAST) is False


def test_needs_rehash_against_the_current_parameters_by_default():
    assert needs_rehash(hash_password("pw", params=FAST)) is True


def test_an_unknown_user_never_verifies():
    assert verify_unknown_user("guest", params=FAST) is False
    assert verify_unknown_user("", params=FAST) is False


def test_an_unknown_user_costs_a_real_verification(monkeypatch):
    """The dummy check runs scrypt at the same parameters as a real one, so a login naming an
    unknown user takes as long as a wrong password."""
    calls = []
    real_scrypt = hashlib.scrypt

    def counting_scrypt(password, **kwargs):
        calls.append((kwargs["n"], kwargs["r"], kwargs["p"], kwargs["dklen"]))
        return real_scrypt(password, **kwargs)

    monkeypatch.setattr(hashlib, "scrypt", counting_scrypt)
    verify_unknown_user("pw", params=FAST)
    verify_password("pw", hash_password("pw", params=FAST))
    assert calls == [(16, 1, 1, 32)] * 3


def test_scrypt_params_are_validated():
    with pytest.raises(ValueError, match="power of two"):
        ScryptParams(n=24, r=1, p=1)
    with pytest.raises(ValueError, match="more than"):
        ScryptParams(n=2**20, r=8, p=1)


# Seed §2.1.1.3's example line: "martin:X03MO1qnZdYdgyfeuILPmQ==" is the MD5 of "password".
MARTIN_MD5 = "X03MO1qnZdYdgyfeuILPmQ=="


def test_a_scrypt_credential_round_trips_and_verifies():
    credential = Credential.from_password("pw", params=FAST)
    assert credential.kind is CredentialKind.SCRYPT
    assert credential.weak is False
    assert credential.encode().startswith("scrypt$n=16,r=1,p=1$")
    assert Credential.decode(credential.encode()) == credential
    assert credential.verify("pw") is True
    assert credential.verify("pw2") is False


def test_a_legacy_md5_credential_verifies_the_seed_example():
    """§2.1.1.3: "The password field contains the MD5 Hash of the users password encoded in
    Base64."""
    credential = Credential(CredentialKind.LEGACY_MD5, MARTIN_MD5)
    assert credential.verify("password", params=FAST) is True
    assert credential.verify("Password", params=FAST) is False
    assert credential.verify("", params=FAST) is False


def test_a_legacy_md5_credential_is_weak_and_round_trips():
    credential = Credential(CredentialKind.LEGACY_MD5, MARTIN_MD5)
    assert credential.weak is True
    assert credential.encode() == "md5$" + MARTIN_MD5
    assert Credential.decode("md5$" + MARTIN_MD5) == credential


def test_a_legacy_md5_accepts_both_qpid_encodings_of_non_ascii():
    """qpid-passwd hashed the UTF-8 bytes; the Qpid broker hashed each character cast to a byte."""
    utf8 = base64.b64encode(hashlib.md5("pässwörd".encode()).digest()).decode()
    low_bytes = base64.b64encode(hashlib.md5("pässwörd".encode("latin-1")).digest()).decode()
    assert Credential(CredentialKind.LEGACY_MD5, utf8).verify("pässwörd", params=FAST) is True
    assert Credential(CredentialKind.LEGACY_MD5, low_bytes).verify("pässwörd", params=FAST) is True


def test_a_legacy_md5_check_also_does_the_scrypt_work(monkeypatch):
    """A legacy user must not answer faster than a current one and so stand out by timing."""
    calls = []
    real_scrypt = hashlib.scrypt

    def counting_scrypt(password, **kwargs):
        calls.append(kwargs["n"])
        return real_scrypt(password, **kwargs)

    monkeypatch.setattr(hashlib, "scrypt", counting_scrypt)
    Credential(CredentialKind.LEGACY_MD5, MARTIN_MD5).verify("password", params=FAST)
    assert calls == [16]


def test_needs_upgrade_for_legacy_md5_and_old_parameters():
    """A legacy MD5 is upgraded to scrypt on the next successful login, as is an old scrypt."""
    assert Credential(CredentialKind.LEGACY_MD5, MARTIN_MD5).needs_upgrade(params=FAST) is True
    assert Credential.from_password("pw", params=FASTER).needs_upgrade(params=FAST) is True
    assert Credential.from_password("pw", params=FAST).needs_upgrade(params=FAST) is False


@pytest.mark.parametrize(
    "encoded",
    ["", "md5$", "md5$X03MO1qnZdYdgyfe", "md5$AAAA", "md5$not base64!", "sha1$abc", MARTIN_MD5],
)
def test_decoding_garbage_raises(encoded):
    with pytest.raises(MalformedHashError):
        Credential.decode(encoded)


def test_a_credential_cannot_be_built_unverifiable():
    with pytest.raises(MalformedHashError):
        Credential(CredentialKind.SCRYPT, "md5$" + MARTIN_MD5)
