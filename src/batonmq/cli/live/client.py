"""batonctl's client of a running broker's management HTTP API (RabbitMQ's endpoints), with the
standard library's urllib: batonctl loads no HTTP library of its own, and a broker's
administrator needs nothing installed beyond BatonMQ.

The API is at --url, else BATONCTL_URL, else RabbitMQ's default, http://localhost:15672. Who
logs in, in order: --user, else BATONCTL_USER, else guest; with the password of
--password, else the first line of --password-file (refused unless only its owner may read it,
as ssh refuses a private key others can read), else BATONCTL_PASSWORD, else guest. RabbitMQ's
guest may log in only from the broker's own host, as over AMQP. An https API's certificate is
checked against the system's certificate authorities, or --cacert's.

An error answer is an `ApiRefused` with what RabbitMQ's body gives (`{"error", "reason"}`), for
the command to say what it was refusing; anything else is a `CommandFailed` of one line: a
broker that does not answer ("no broker answers at URL"), a certificate that cannot be trusted,
an answer that is not the API's JSON.
"""

from __future__ import annotations

import base64
import contextlib
import json
import ssl
import stat
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.client import HTTPException
from pathlib import Path
from typing import Final

from batonmq.cli.broker import EXIT_USAGE
from batonmq.cli.storecommand import CommandFailed
from batonmq.management.listing import Json

DEFAULT_URL: Final = "http://localhost:15672"
URL_VARIABLE: Final = "BATONCTL_URL"
USER_VARIABLE: Final = "BATONCTL_USER"
PASSWORD_VARIABLE: Final = "BATONCTL_PASSWORD"
#: RabbitMQ's default user, which BatonMQ also creates.
DEFAULT_CREDENTIALS: Final = ("guest", "guest")
#: Seconds to wait for an answer (a definitions import of many objects takes a while).
TIMEOUT: Final = 60.0
#: The RabbitMQ error whose 401 is a failed login, not a refusal of what was asked.
_LOGIN_FAILED: Final = "not_authorized"


class ApiRefused(Exception):
    """The API answered with an error status and RabbitMQ's body `{"error", "reason"}`."""

    def __init__(self, status: int, error: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.error = error
        self.reason = reason

    def __str__(self) -> str:
        if self.status == 404:
            return "not found"
        if self.error in self.reason or self.reason in self.error:
            return f"{self.reason} ({self.status})"
        return f"{self.reason} ({self.status} {self.error})"


@contextlib.contextmanager
def not_found_as(message: str) -> Iterator[None]:
    """A 404 answer to a request in the block is CommandFailed(`message`), which names what
    is missing ("there is no virtual host 'x'") where the API says "Not Found"."""
    try:
        yield
    except ApiRefused as refusal:
        if refusal.status != 404:
            raise
        raise CommandFailed(message) from None


@dataclass(frozen=True, slots=True)
class Credentials:
    user: str
    password: str = field(repr=False)


def api_url(url: str | None, environ: Mapping[str, str]) -> str:
    """The API's URL, from the option and the environment (see the module's text)."""
    return checked_url(url if url is not None else environ.get(URL_VARIABLE) or DEFAULT_URL)


def credentials(
    user: str | None,
    password: str | None,
    password_file: Path | None,
    environ: Mapping[str, str],
) -> Credentials:
    """Who logs in, from the options and the environment (see the module's text)."""
    name = user if user is not None else environ.get(USER_VARIABLE, DEFAULT_CREDENTIALS[0])
    if password is not None:
        return Credentials(name, password)
    if password_file is not None:
        return Credentials(name, read_password_file(password_file))
    return Credentials(name, environ.get(PASSWORD_VARIABLE, DEFAULT_CREDENTIALS[1]))


def read_password_file(path: Path) -> str:
    """The file's first line; refused when anyone but its owner may read or write it."""
    try:
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise CommandFailed(
                f"--password-file {path}: others may read it (mode {stat.S_IMODE(mode):04o}): "
                f"make it readable by its owner only (chmod 600 {path})",
                EXIT_USAGE,
            )
        with path.open(encoding="utf-8") as file:
            line = file.readline().rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise CommandFailed(f"--password-file {path}: {reason}", EXIT_USAGE) from None
    if not line:
        raise CommandFailed(f"--password-file {path}: the first line is empty", EXIT_USAGE)
    return line


def checked_url(url: str) -> str:
    """The API's base URL (without a trailing /); a usage error unless http or https."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise CommandFailed(
            f"--url {url}: expected http://HOST:PORT or https://HOST:PORT", EXIT_USAGE
        )
    return url.rstrip("/")


def tls_context(cafile: Path | None) -> ssl.SSLContext | None:
    """How an https API's certificate is checked: against `cafile`'s certificate authorities
    (--cacert), else the system's (None: urllib's default)."""
    if cafile is None:
        return None
    try:
        return ssl.create_default_context(cafile=cafile)
    except (OSError, ssl.SSLError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise CommandFailed(f"--cacert {cafile}: {reason}", EXIT_USAGE) from None


def quoted(*parts: str) -> str:
    """Path segments, each %-encoded whole (the virtual host "/" is %2F, as RabbitMQ's)."""
    return "/".join(urllib.parse.quote(part, safe="") for part in parts)


class BrokerClient:
    """Requests to one broker's API as one user; each returns the decoded JSON answer (None
    for an empty one) or raises ApiRefused (an error answer) or CommandFailed (no answer)."""

    def __init__(self, url: str, login: Credentials, tls: ssl.SSLContext | None = None) -> None:
        self.url = checked_url(url)
        self.user = login.user
        self._tls = tls
        token = base64.b64encode(f"{login.user}:{login.password}".encode()).decode("ascii")
        self._authorization = f"Basic {token}"

    def get(self, path: str) -> Json:
        return self.request("GET", path)[1]

    def put(self, path: str, body: Json = None) -> int:
        """The answer's status (RabbitMQ: 201 created, 204 it was there)."""
        return self.request("PUT", path, body)[0]

    def post(self, path: str, body: Json) -> Json:
        return self.request("POST", path, body)[1]

    def delete(self, path: str, headers: Mapping[str, str] | None = None) -> None:
        self.request("DELETE", path, headers=headers)

    def request(
        self,
        method: str,
        path: str,
        body: Json = None,
        *,
        headers: Mapping[str, str] | None = None,
        accept: tuple[int, ...] = (),
    ) -> tuple[int, Json]:
        """(status, decoded answer) of one request to `path` (from /api/...). An error
        status in `accept` is answered as a success (the alarms check's 503)."""
        request = urllib.request.Request(
            self.url + path,
            data=None if body is None else json.dumps(body).encode("utf-8"),
            method=method,
            headers={"Authorization": self._authorization, "Content-Type": "application/json"},
        )
        for name, value in (headers or {}).items():
            # http.client sends a str as Latin-1 only; UTF-8 bytes go as they are.
            request.add_header(name, value.encode("utf-8"))  # type: ignore[arg-type]
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT, context=self._tls) as response:
                return response.status, self._decoded(response.read())
        except urllib.error.HTTPError as error:
            with error:
                answer = self._decoded(error.read())
            if error.code in accept:
                return error.code, answer
            raise self._refusal(error.code, answer) from None
        except urllib.error.URLError as error:
            if isinstance(error.reason, ConnectionRefusedError):
                raise CommandFailed(f"no broker answers at {self.url}") from None
            if isinstance(error.reason, ssl.SSLCertVerificationError):
                raise CommandFailed(
                    f"cannot trust {self.url}: {error.reason.verify_message} (--cacert names "
                    "the certificate authority to trust)"
                ) from None
            raise CommandFailed(f"cannot reach {self.url}: {error.reason}") from None
        except (OSError, HTTPException) as error:  # reset, timed out, a garbled answer
            raise CommandFailed(
                f"cannot reach {self.url}: {error or type(error).__name__}"
            ) from None

    def _decoded(self, raw: bytes) -> Json:
        if not raw:
            return None
        try:
            decoded: Json = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise CommandFailed(
                f"{self.url} does not answer as a management HTTP API (not JSON)"
            ) from None
        return decoded

    def _refusal(self, status: int, answer: Json) -> CommandFailed | ApiRefused:
        if not isinstance(answer, dict):
            return CommandFailed(f"{self.url} answered {status} without RabbitMQ's error body")
        error, reason = str(answer.get("error", "")), str(answer.get("reason", ""))
        if status == 401 and error == _LOGIN_FAILED:
            return CommandFailed(
                f"the broker at {self.url} refused the login of user '{self.user}' (wrong user "
                f"name or password; see --user, --password-file, {USER_VARIABLE}, "
                f"{PASSWORD_VARIABLE})"
            )
        return ApiRefused(status, error, reason)
