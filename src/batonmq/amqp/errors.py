"""Typed protocol errors: each carries its reply code and text, the failing method, and whether it
closes a channel or the whole connection, exactly as amqp0-9-1.xml classifies the code."""

from __future__ import annotations

from pamqp import base

from batonmq.amqp.constants import ReplyCode


class ProtocolError(Exception):
    """An AMQP error. Make one with `amqp_error`, which picks the class the spec gives the code."""

    def __init__(
        self, reply_code: ReplyCode, reply_text: str, method: type[base.Frame] | None = None
    ) -> None:
        super().__init__(f"{reply_code.value} {reply_code.name} - {reply_text}")
        self.reply_code = reply_code
        #: The text as given, and as the close method carries it: prefixed with the code's name.
        self.text = reply_text
        self.reply_text = f"{reply_code.name} - {reply_text}"
        self.class_id, self.method_id = method_ids(method)

    @property
    def closes_connection(self) -> bool:
        return isinstance(self, HardError)

    def naming(self, method: type[base.Frame]) -> ProtocolError:
        """This error, naming `method` as the failing one unless it already names one."""
        if (self.class_id, self.method_id) == (0, 0):
            self.class_id, self.method_id = method_ids(method)
        return self


class ChannelError(ProtocolError):
    """A soft error (spec: "soft-error"): closes one channel, the connection goes on."""


class HardError(ProtocolError):
    """A hard error (spec: "hard-error"): closes the whole connection."""


def amqp_error(
    reply_code: ReplyCode, reply_text: str, method: type[base.Frame] | None = None
) -> ProtocolError:
    """The error for `reply_code`: a ChannelError for soft codes, else a HardError."""
    cls = ChannelError if reply_code.is_soft else HardError
    return cls(reply_code, reply_text, method)


def method_ids(method: type[base.Frame] | None) -> tuple[int, int]:
    """(class-id, method-id) of a pamqp method class; (0, 0) when there is none."""
    if method is None:
        return 0, 0
    return method.index >> 16, method.index & 0xFFFF
