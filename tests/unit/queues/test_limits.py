"""The classic queue's limits as pure decisions (RabbitMQ "Queue Length Limit": "The default
behaviour for RabbitMQ when a maximum queue length or size is set and the maximum is reached is
to drop or dead-letter messages from the front of the queue"; with reject-publish "the most
recently published messages will be discarded"), and flow control (Qpid manual §1.5.1)."""

from __future__ import annotations

import logging

import pytest
from pamqp.common import FieldTable

from batonmq.queues.arguments import QueueArguments
from batonmq.queues.limits import (
    Admission,
    FlowControl,
    admission,
    drops_head,
    over_limit,
    screens,
)


def options(arguments: FieldTable) -> QueueArguments:
    return QueueArguments.parse(arguments)


def test_a_queue_without_limits_is_never_screened_and_never_trimmed():
    plain = options({})
    assert not screens(plain)
    assert not drops_head(plain)
    assert admission(plain, 10**9, 10**9, 10**9) is Admission.TAKE


def test_drop_head_takes_everything_and_trims_when_over():
    """drop-head: the message is taken; the queue then drops from its head."""
    limited = options({"x-max-length": 2})
    assert not screens(limited)
    assert drops_head(limited)
    assert not over_limit(limited, 2, 0)
    assert over_limit(limited, 3, 0)
    by_bytes = options({"x-max-length-bytes": 10})
    assert not over_limit(by_bytes, 5, 10) and over_limit(by_bytes, 1, 11)


@pytest.mark.parametrize(
    ("overflow", "refused"),
    [("reject-publish", Admission.REFUSE), ("reject-publish-dlx", Admission.REFUSE_DEAD_LETTER)],
)
def test_reject_publish_refuses_what_there_is_no_room_for(overflow, refused):
    """RabbitMQ: "reject-publish ... the most recently published messages will be discarded";
    reject-publish-dlx also dead-letters them."""
    full_at_two = options({"x-max-length": 2, "x-max-length-bytes": 10, "x-overflow": overflow})
    assert screens(full_at_two)
    assert admission(full_at_two, 1, 1, 0) is Admission.TAKE
    assert admission(full_at_two, 1, 2, 0) is refused
    assert admission(full_at_two, 5, 1, 6) is refused  # 6 + 5 bytes > 10
    assert admission(full_at_two, 4, 1, 6) is Admission.TAKE


def test_a_body_over_the_message_size_limit_is_refused_without_dead_lettering():
    sized = options({"x-max-message-size": 4})
    assert screens(sized)
    assert admission(sized, 5, 0, 0) is Admission.REFUSE
    assert admission(sized, 4, 0, 0) is Admission.TAKE


def test_flow_control_is_overfull_above_capacity_and_underfull_below_resume(caplog):
    """Qpid manual §1.5.1: flow control is enforced above x-qpid-capacity and lifted "when its
    size becomes less than the flowResumeCapacity" (QUE-1003 Overfull, QUE-1004 Underfull)."""
    flow = FlowControl(
        options(
            {
                "x-overflow": "flow-control",
                "x-qpid-capacity": 300,
                "x-qpid-flow-resume-capacity": 200,
            }
        ),
        vhost="/",
        queue="q",
    )
    resumed: list[str] = []
    with caplog.at_level(logging.INFO, logger="batonmq.queues.limits"):
        flow.check_over(3, 300)
        assert not flow.overfull
        flow.check_over(4, 400)
        assert flow.overfull
        flow.when_underfull(lambda: resumed.append("go"))
        flow.check_under(3, 250)
        assert flow.overfull and resumed == []
        flow.check_under(2, 100)
    assert not flow.overfull and resumed == ["go"]
    assert caplog.messages == [
        "QUE-1003 : Overfull : Size : 400 bytes, Capacity : 300",
        "QUE-1004 : Underfull : Size : 100 bytes, Resume Capacity : 200",
    ]


def test_a_deleted_overfull_queue_releases_its_publishers_without_a_log(caplog):
    flow = FlowControl(
        options({"x-overflow": "flow-control", "x-max-length": 1}), vhost="/", queue="q"
    )
    flow.check_over(2, 2)
    resumed: list[str] = []
    flow.when_underfull(lambda: resumed.append("go"))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="batonmq.queues.limits"):
        flow.check_under(5, 5, deleted=True)
    assert resumed == ["go"] and caplog.messages == []
