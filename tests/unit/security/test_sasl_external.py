"""SASL EXTERNAL: the TLS client certificate's subject CN is the username.

The certificates are dicts of the shape `ssl.SSLSocket.getpeercert()` returns for a verified
peer; tests/integration/test_tls.py logs in with real certificates from a CA made in the test.
"""

from __future__ import annotations

import pytest

from batonmq.security.sasl import (
    SaslError,
    decode_response,
    external_username,
    username_from_certificate,
)


def certificate(*subject):
    """getpeercert()'s dict: "subject" is a tuple of RDNs, each a tuple of (name, value)."""
    return {
        "subject": subject,
        "issuer": ((("countryName", "GB"),), (("commonName", "BatonMQ test CA"),)),
        "version": 3,
        "serialNumber": "01",
        "notBefore": "Jan  1 00:00:00 2025 GMT",
        "notAfter": "Jan  1 00:00:00 2035 GMT",
    }


ALICE = certificate(
    (("countryName", "GB"),),
    (("organizationName", "Example Ltd"),),
    (("commonName", "alice"),),
)


def test_the_username_is_the_subjects_common_name():
    assert username_from_certificate(ALICE) == "alice"


def test_a_cn_in_a_multi_valued_rdn_is_found():
    cert = certificate(
        (("organizationalUnitName", "ops"), ("commonName", "bob")),
    )
    assert username_from_certificate(cert) == "bob"


def test_the_issuers_cn_is_not_the_username():
    cert = certificate((("organizationName", "Example Ltd"),))
    with pytest.raises(SaslError, match="exactly one non-empty CN"):
        username_from_certificate(cert)


@pytest.mark.parametrize("peer_certificate", [None, {}])
def test_no_verified_certificate_is_refused(peer_certificate):
    """getpeercert() is None without a certificate and {} when it was not verified."""
    with pytest.raises(SaslError, match="needs a verified TLS client certificate"):
        username_from_certificate(peer_certificate)


@pytest.mark.parametrize(
    "peer_certificate",
    [
        certificate((("commonName", "alice"),), (("commonName", "admin"),)),
        certificate((("commonName", ""),)),
    ],
)
def test_several_or_empty_cns_are_refused(peer_certificate):
    """Which of several CNs would be the user is ambiguous, so none is."""
    with pytest.raises(SaslError, match="exactly one non-empty CN"):
        username_from_certificate(peer_certificate)


@pytest.mark.parametrize(
    "peer_certificate",
    [
        {"issuer": ALICE["issuer"]},
        {"subject": "CN=alice"},
        {"subject": ("commonName", "alice")},
        {"subject": ((("commonName",),),)},
        {"subject": ((("commonName", b"alice"),),)},
    ],
)
def test_a_subject_not_shaped_like_getpeercert_is_refused(peer_certificate):
    with pytest.raises(SaslError, match="subject"):
        username_from_certificate(peer_certificate)


def test_external_with_an_empty_response_logs_in_as_the_cn():
    """RFC 4422 appendix A.1: the authorization identity "If empty, the client is requesting to
    act as the identity the server has associated with the client's credentials."""
    assert external_username(b"", ALICE) == "alice"


def test_external_with_the_cn_as_authorization_identity_logs_in():
    assert external_username(b"alice", ALICE) == "alice"


def test_external_asking_to_act_as_another_user_is_refused():
    """RFC 4422 appendix A.1: "If non-empty, the client is requesting to act as the identity
    represented by the string." A certificate for alice does not entitle it to be admin."""
    with pytest.raises(SaslError, match="is not the client certificate's CN 'alice'"):
        external_username(b"admin", ALICE)


def test_external_authorization_identity_must_be_utf8():
    with pytest.raises(SaslError, match="not UTF-8"):
        external_username(b"\xff", ALICE)


def test_external_without_a_certificate_is_refused():
    with pytest.raises(SaslError, match="needs a verified TLS client certificate"):
        external_username(b"", None)


def test_password_mechanisms_do_not_accept_external():
    """EXTERNAL needs the certificate, so it is not one of the response-only decoders."""
    with pytest.raises(SaslError, match="unsupported mechanism EXTERNAL"):
        decode_response("EXTERNAL", b"")
