"""The amqps listener's TLS context from `[listeners.amqps]`, and every way its settings can be
wrong.

The Security requirements: "An amqps listener (default 5671) with certificate, key, CA bundle,
client-certificate verification none / optional / required, TLS 1.2 minimum, configurable ciphers
... Errors in TLS configuration stop the broker with a clear message at start-up." Each error below
is a TlsConfigError whose key is the setting at fault and whose text names the file and what is
wrong with it; tests/integration/test_tls.py shows the broker refusing to start with one.
"""

from __future__ import annotations

import dataclasses
import ssl
from pathlib import Path

import pytest

from batonmq.config import ConfigError, TlsListenerConfig
from batonmq.security.tls import TlsConfigError, server_context
from tests.tlsca import KeyPair, TestCA


@dataclasses.dataclass(frozen=True)
class Files:
    ca: TestCA
    server: KeyPair
    other_server: KeyPair
    encrypted: KeyPair
    garbage: Path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    directory = tmp_path_factory.mktemp("tls")
    ca = TestCA(directory)
    garbage = directory / "garbage.pem"
    garbage.write_text("this is not PEM\n")
    return Files(
        ca=ca,
        server=ca.server(),
        other_server=ca.server("other-server"),
        encrypted=ca.server("encrypted", key_password=b"secret"),
        garbage=garbage,
    )


def settings(files: Files, **changes: object) -> TlsListenerConfig:
    """A usable configuration (server authentication only), with `changes`."""
    usable = TlsListenerConfig(
        enabled=True,
        certfile=files.server.certfile,
        keyfile=files.server.keyfile,
        mechanisms="PLAIN AMQPLAIN",
    )
    return dataclasses.replace(usable, **changes)


def refusal(config: TlsListenerConfig) -> TlsConfigError:
    with pytest.raises(TlsConfigError) as raised:
        server_context(config)
    return raised.value


# --- What a usable configuration gives ----------------------------------------------------------


@pytest.mark.parametrize(
    ("verify", "mode"),
    [("none", ssl.CERT_NONE), ("optional", ssl.CERT_OPTIONAL), ("required", ssl.CERT_REQUIRED)],
)
def test_the_context_verifies_client_certificates_as_configured(files, verify, mode):
    """The Security requirements: "client-certificate verification none / optional / required"."""
    cafile = None if verify == "none" else files.ca.certfile
    context = server_context(settings(files, verify=verify, cafile=cafile))
    assert context.verify_mode == mode


def test_tls_1_2_is_the_minimum(files):
    """The Security requirements: "TLS 1.2 minimum"."""
    context = server_context(settings(files))
    assert context.minimum_version is ssl.TLSVersion.TLSv1_2
    assert context.protocol is ssl.PROTOCOL_TLS_SERVER


def test_the_cipher_list_is_applied(files):
    """The Security requirements: "configurable ciphers". The TLS 1.2 suites are exactly those the
    list names (OpenSSL keeps its TLS 1.3 suites whatever the list)."""
    context = server_context(settings(files, ciphers="ECDHE-ECDSA-AES256-GCM-SHA384"))
    tls12_names = {
        cipher["name"] for cipher in context.get_ciphers() if cipher["protocol"] == "TLSv1.2"
    }
    assert tls12_names == {"ECDHE-ECDSA-AES256-GCM-SHA384"}


def test_a_config_error_is_a_value_error(files):
    """TlsConfigError is a ConfigError (and so a ValueError): `run` reports both alike."""
    error = refusal(settings(files, certfile=None))
    assert isinstance(error, ConfigError)
    assert isinstance(error, ValueError)


# --- Each error names its setting ---------------------------------------------------------------


@pytest.mark.parametrize("setting", ["certfile", "keyfile"])
def test_certificate_and_key_must_be_set(files, setting):
    error = refusal(settings(files, **{setting: None}))
    assert error.key == f"listeners.amqps.{setting}"
    assert str(error) == (
        f"listeners.amqps.{setting}: must be set when listeners.amqps.enabled is true"
    )


@pytest.mark.parametrize("setting", ["certfile", "keyfile", "cafile"])
def test_a_missing_file_is_named(files, tmp_path, setting):
    missing = tmp_path / "missing.pem"
    config = settings(
        files, **{"verify": "required", "cafile": files.ca.certfile, setting: missing}
    )
    error = refusal(config)
    assert str(error) == f"listeners.amqps.{setting}: {missing}: no such file"


def test_a_directory_is_not_a_pem_file(files, tmp_path):
    error = refusal(settings(files, keyfile=tmp_path))
    assert str(error) == f"listeners.amqps.keyfile: {tmp_path}: is a directory, not a PEM file"


def test_a_path_through_a_file_cannot_be_read(files):
    """Any other reason the file cannot be opened (permissions too) is given in the operating
    system's words."""
    through_a_file = files.server.certfile / "server.key"
    error = refusal(settings(files, keyfile=through_a_file))
    assert str(error) == (
        f"listeners.amqps.keyfile: {through_a_file}: cannot read the file: Not a directory"
    )


def test_a_key_that_does_not_match_the_certificate(files):
    error = refusal(settings(files, keyfile=files.other_server.keyfile))
    assert error.key == "listeners.amqps.keyfile"
    assert "this key does not match the certificate in listeners.amqps.certfile" in str(error)
    assert str(files.other_server.keyfile) in str(error)


@pytest.mark.parametrize(
    ("setting", "wrong_file", "problem"),
    [
        ("certfile", "garbage", "no PEM certificate in it"),
        # The key where the certificate belongs: OpenSSL's "PEM lib" would not say which.
        ("certfile", "key", "no PEM certificate in it"),
        ("keyfile", "garbage", "no PEM private key in it"),
        ("keyfile", "certificate", "no PEM private key in it"),
    ],
)
def test_a_file_without_the_pem_it_should_hold(files, setting, wrong_file, problem):
    path = {
        "garbage": files.garbage,
        "key": files.server.keyfile,
        "certificate": files.server.certfile,
    }[wrong_file]
    error = refusal(settings(files, **{setting: path}))
    assert str(error) == f"listeners.amqps.{setting}: {path}: {problem}"


def test_an_encrypted_key_is_refused_without_prompting(files):
    """OpenSSL would otherwise ask for the passphrase on the terminal, and a broker started by a
    service manager would wait there for ever."""
    error = refusal(
        settings(files, certfile=files.encrypted.certfile, keyfile=files.encrypted.keyfile)
    )
    assert error.key == "listeners.amqps.keyfile"
    assert "encrypted with a passphrase" in str(error)


def test_a_ca_bundle_without_certificates(files):
    error = refusal(settings(files, verify="required", cafile=files.garbage))
    assert str(error) == f"listeners.amqps.cafile: {files.garbage}: no PEM certificate in it"


def test_an_invalid_cipher_list(files):
    error = refusal(settings(files, ciphers="NO-SUCH-CIPHER"))
    assert error.key == "listeners.amqps.ciphers"
    assert "'NO-SUCH-CIPHER': no cipher matches" in str(error)


@pytest.mark.parametrize("verify", ["optional", "required"])
def test_verifying_client_certificates_needs_a_ca_bundle(files, verify):
    error = refusal(settings(files, verify=verify, cafile=None))
    assert error.key == "listeners.amqps.cafile"
    assert f'must be set when listeners.amqps.verify is "{verify}"' in str(error)


def test_external_needs_client_certificates_to_be_asked_for(files):
    """Qpid manual §2.3 has the client prove who it is with its certificate; with verify = "none"
    the broker never asks for one, so EXTERNAL could only ever fail."""
    error = refusal(settings(files, mechanisms="PLAIN EXTERNAL", verify="none"))
    assert error.key == "listeners.amqps.mechanisms"
    assert "offers EXTERNAL" in str(error)
    assert 'listeners.amqps.verify is "none"' in str(error)
