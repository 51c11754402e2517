"""Typed protocol errors: reply code and text, the failing method, and whether the error closes a
channel or the connection, as amqp0-9-1.xml classifies each reply code ("soft-error" /
"hard-error")."""

from __future__ import annotations

import pytest
from pamqp import commands

from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.errors import ChannelError, HardError, ProtocolError, amqp_error, method_ids

#: amqp0-9-1.xml: the reply codes whose class is "soft-error".
SOFT = {311, 312, 313, 403, 404, 405, 406}
#: ... and those whose class is "hard-error".
HARD = {320, 402, 501, 502, 503, 504, 505, 506, 530, 540, 541}


@pytest.mark.parametrize("code", sorted(SOFT | HARD))
def test_amqp_error_picks_the_class_the_spec_gives_the_code(code):
    """amqp0-9-1.xml constants: e.g. 404 not-found is class "soft-error" (closes the channel),
    504 channel-error is class "hard-error" (closes the connection)."""
    error = amqp_error(ReplyCode(code), "text")
    assert isinstance(error, ProtocolError)
    if code in SOFT:
        assert type(error) is ChannelError
        assert not error.closes_connection
    else:
        assert type(error) is HardError
        assert error.closes_connection


def test_every_reply_code_but_success_is_classified():
    """amqp0-9-1.xml gives every reply code but 200 reply-success a class: soft-error or hard-error.
    amqp0-9-1.xml gives every reply code but 200 reply-success a class: soft-error or hard-error."""
    assert {int(code) for code in ReplyCode} - {200} == SOFT | HARD
    assert {code for code in SOFT | HARD if ReplyCode(code).is_soft} == SOFT


def test_reply_text_starts_with_the_code_name():
    """RabbitMQ's convention, which clients show: "NOT_FOUND - no queue 'q' in vhost '/'"."""
    error = amqp_error(ReplyCode.NOT_FOUND, "no queue 'q'")
    assert error.reply_code is ReplyCode.NOT_FOUND
    assert error.reply_text == "NOT_FOUND - no queue 'q'"
    assert str(error) == "404 NOT_FOUND - no queue 'q'"


def test_the_failing_method_gives_class_and_method_ids():
    """connection.close / channel.close carry class-id and method-id "of the method which caused
    the exception"; queue.declare is class 50, method 10."""
    error = amqp_error(ReplyCode.PRECONDITION_FAILED, "x", commands.Queue.Declare)
    assert (error.class_id, error.method_id) == (50, 10)
    assert method_ids(commands.Basic.Publish) == (60, 40)
    assert method_ids(None) == (0, 0)


def test_naming_fills_in_the_method_only_when_none_was_given():
    """connection.close / channel.close class-id and method-id name "the method which caused the
    exception": the innermost naming wins."""
    unnamed = amqp_error(ReplyCode.NOT_FOUND, "x")
    assert (unnamed.class_id, unnamed.method_id) == (0, 0)
    assert unnamed.naming(commands.Basic.Get) is unnamed
    assert (unnamed.class_id, unnamed.method_id) == (60, 70)
    named = amqp_error(ReplyCode.NOT_FOUND, "x", commands.Queue.Bind)
    named.naming(commands.Basic.Get)
    assert (named.class_id, named.method_id) == (50, 20)
