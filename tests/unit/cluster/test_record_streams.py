"""Every kind of peer-link record, of every module, through the reader of a stream socket."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.recordstream import Encodable, read_back, stream_of
from tests.unit.cluster import test_consumerecords, test_publishrecords, test_topologyrecords
from tests.unit.cluster.test_topologyrecords import same_record

records = st.one_of(
    test_topologyrecords.records, test_publishrecords.records, test_consumerecords.records
)
DECODERS: dict[int, Callable[[bytes], object]] = {
    **test_topologyrecords.DECODERS,
    **test_publishrecords.DECODERS,
    **test_consumerecords.DECODERS,
}


@settings(max_examples=300, deadline=None)
@given(st.lists(records, min_size=1, max_size=4))
def test_every_record_comes_back_through_the_reader_cut_at_every_octet(
    sent: list[Encodable],
) -> None:
    """A stream socket may cut a record anywhere (STYLE, "Partial input is not an error"):
    whatever the cut, and whichever kinds follow each other on a link, each record decodes to
    what was sent."""
    stream = stream_of(sent)
    for cut in range(len(stream) + 1):
        got = read_back((stream[:cut], stream[cut:]), DECODERS)
        assert len(got) == len(sent)
        assert all(same_record(a, b) for a, b in zip(got, sent, strict=True))
