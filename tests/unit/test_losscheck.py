"""The loss checker's accounting (tests/losscheck.py), on histories written by hand: each promise
it holds a broker to is caught when broken, and nothing allowed is reported."""

from __future__ import annotations

from tests.losscheck import History, analyse


def history(**fields: object) -> History:
    made = History(published=set(range(10)), confirmed=set(range(8)))
    for name, value in fields.items():
        setattr(made, name, value)
    return made


def test_every_confirmed_message_delivered_once_is_clean() -> None:
    report = analyse(history(deliveries=[(n, False) for n in range(8)]))

    assert report.problems() == []
    assert (report.published, report.confirmed, report.delivered) == (10, 8, 8)


def test_a_confirmed_message_never_delivered_is_lost() -> None:
    report = analyse(history(deliveries=[(n, False) for n in range(7)]))

    assert report.lost == [7]
    assert report.problems() == ["1 lost, e.g. [7]"]


def test_a_delivery_of_something_never_published_is_unexpected() -> None:
    report = analyse(history(deliveries=[(n, False) for n in [*range(8), 42]]))

    assert report.unexpected == [42]


def test_a_second_delivery_must_be_flagged_redelivered() -> None:
    flagged = analyse(history(deliveries=[*[(n, False) for n in range(8)], (3, True)]))
    unflagged = analyse(history(deliveries=[*[(n, False) for n in range(8)], (3, False)]))

    assert flagged.problems() == []
    assert unflagged.duplicated == [3]


def test_a_nacked_message_must_not_be_delivered() -> None:
    report = analyse(history(nacked={8}, deliveries=[(n, False) for n in range(9)]))

    assert report.nacked_delivered == [8]


def test_unconfirmed_messages_may_arrive_and_are_counted_as_recovered() -> None:
    report = analyse(history(deliveries=[(n, False) for n in range(10)]))

    assert report.problems() == []
    assert report.recovered == 2
