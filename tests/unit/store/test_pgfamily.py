"""Which leases of a standalone broker's PostgreSQL identities keep a claim out
(`batonmq.store.pgfamily.is_rival`): the broker's own identity and its workers' exclude each
other, siblings do not, and another broker's identities are none of its business."""

from __future__ import annotations

from batonmq.store.pgfamily import is_rival


def test_the_brokers_identity_and_its_workers_exclude_each_other() -> None:
    """The Durable messaging requirements: a clear error for "a store locked by another running
    broker", whether that broker runs one process or workers."""
    assert is_rival("b1", "b1", "b1w0")
    assert is_rival("b1", "b1", "b1w12")
    assert is_rival("b1", "b1w0", "b1")


def test_siblings_and_strangers_do_not() -> None:
    """Workers of one broker run side by side, each with a lease of its own; an identity that
    is not the broker's or a worker's of it (another broker sharing the schema) is left alone."""
    assert not is_rival("b1", "b1w0", "b1w1")
    assert not is_rival("b1", "b1", "b2")
    assert not is_rival("b1", "b1", "b1wx")
    assert not is_rival("b1", "b1w0", "b2")
    # An identity of the schema that is not of this family claims for itself alone.
    assert not is_rival("b1", "b2", "b1w0")
