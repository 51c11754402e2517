"""What a broker's queues hold, all together: the measure of MQ 3.5 admin guide's system-wide limits
(Table 2-4, imq.system.max_count and imq.system.max_size).

Every queue of a broker adds to one `Holdings` when an entry joins it (published, or recovered
from the store) and takes away when the entry leaves it for good (settled: acknowledged, sent
with no-ack, rejected, dead-lettered, dropped, expired, purged; or its queue deleted). An entry
delivered and not yet settled is still held. A message held by two queues counts twice, as two
entries; its body is in memory once.
"""

from __future__ import annotations


class Holdings:
    __slots__ = ("bytes", "messages")

    def __init__(self) -> None:
        self.messages = 0
        #: Body bytes.
        self.bytes = 0

    def add(self, messages: int, body_bytes: int) -> None:
        self.messages += messages
        self.bytes += body_bytes

    def remove(self, messages: int, body_bytes: int) -> None:
        self.messages -= messages
        self.bytes -= body_bytes
