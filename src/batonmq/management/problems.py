"""The HTTP API's error answers, as RabbitMQ's management API gives them: a status and a JSON
body `{"error": ..., "reason": ...}` (RabbitMQ's rabbit_mgmt_util and
rabbit_web_dispatch_access_control).

- 400 `bad_request`: a body that is not JSON or not what the endpoint takes, a request the
  engine refused as a precondition (406 over AMQP), a body over the size limit.
- 401 `not_authorized` "Not_Authorized": no credentials, or a login that failed.
- 401 `not_authorised`: a user without a management tag ("Not management user"), a tag that
  does not allow the endpoint, or an operation the ACL refuses (RabbitMQ answers an AMQP
  access_refused with 401 "not_authorised" as well).
- 404 `Object Not Found` "Not Found": no such virtual host, queue, exchange, user, connection.
"""

from __future__ import annotations

from typing import Final

from batonmq.amqp.constants import ReplyCode
from batonmq.engine.api import ApiError
from batonmq.management.listing import Json

NOT_AUTHORIZED: Final = "not_authorized"
NOT_AUTHORISED: Final = "not_authorised"
BAD_REQUEST: Final = "bad_request"
NOT_FOUND: Final = "Object Not Found"
#: RabbitMQ's reason for a request without credentials or with wrong ones.
LOGIN_FAILED: Final = "Not_Authorized"


class HttpProblem(Exception):
    """An error answer: `status`, and the body's `error` and `reason`."""

    def __init__(self, status: int, error: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.error = error
        self.reason = reason

    def body(self) -> dict[str, Json]:
        return {"error": self.error, "reason": self.reason}


def bad_request(reason: str) -> HttpProblem:
    return HttpProblem(400, BAD_REQUEST, reason)


def not_found() -> HttpProblem:
    return HttpProblem(404, NOT_FOUND, "Not Found")


def not_authorised(reason: str) -> HttpProblem:
    return HttpProblem(401, NOT_AUTHORISED, reason)


def of_api_error(error: ApiError) -> HttpProblem:
    """The answer to a request the engine refused, by its AMQP reply code."""
    if error.reply_code == ReplyCode.NOT_FOUND:
        return not_found()
    if error.reply_code in (ReplyCode.ACCESS_REFUSED, ReplyCode.NOT_ALLOWED):
        return not_authorised(error.text)
    if error.reply_code == ReplyCode.INTERNAL_ERROR:
        return HttpProblem(500, "internal_error", error.text)
    return bad_request(error.text)
