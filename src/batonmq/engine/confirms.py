"""Publisher confirms as a pure decision (BatonMQ style §5): which basic.ack / basic.nack frames to
send.

Every publish on a channel in confirm mode gets the next sequence number, starting at 1. A publish
is settled once its outcome is known (routed and, for persistent messages, durable; or refused).
`take_frames` returns what to send. A run of settled numbers that directly follows everything
already confirmed, all with the same outcome, collapses into one frame with multiple=true (spec,
basic.ack: "the delivery tag is treated as 'up to and including'"); a number settled beyond a gap
is confirmed on its own, so a multiple frame never covers a publish that is still pending.
"""

from __future__ import annotations

from dataclasses import dataclass

from batonmq.engine.counters import ChannelCounters


@dataclass(frozen=True, slots=True)
class ConfirmFrame:
    delivery_tag: int
    multiple: bool
    ack: bool


class ConfirmTracker:
    def __init__(self, counters: ChannelCounters | None = None) -> None:
        """`counters`: the channel's, which count the publishes confirmed."""
        self._counters = counters or ChannelCounters()
        self.next_sequence = 1
        #: Every sequence number at or below this has been confirmed to the publisher.
        self._confirmed_upto = 0
        #: Outcomes known but not yet sent.
        self._settled: dict[int, bool] = {}
        #: Numbers beyond a gap that were confirmed on their own.
        self._sent_alone: set[int] = set()

    def publish(self) -> int:
        sequence = self.next_sequence
        self.next_sequence += 1
        return sequence

    def settle(self, sequence: int, ack: bool) -> None:
        self._settled[sequence] = ack
        if ack:
            self._counters.confirm += 1

    @property
    def has_settled(self) -> bool:
        return bool(self._settled)

    def take_frames(self) -> list[ConfirmFrame]:
        frames: list[ConfirmFrame] = []
        settled = self._settled
        sent_alone = self._sent_alone
        sequence = self._confirmed_upto + 1
        # The run of equal outcomes being collapsed: its outcome and length (one frame each,
        # made when the run ends, not one object per publish).
        run_ack = False
        run_length = 0
        while True:
            if sequence in settled:
                ack = settled.pop(sequence)
                if run_length and ack == run_ack:
                    run_length += 1
                else:
                    if run_length:
                        frames.append(ConfirmFrame(sequence - 1, run_length > 1, run_ack))
                    run_ack, run_length = ack, 1
            elif sequence in sent_alone:
                sent_alone.discard(sequence)
                if run_length:
                    frames.append(ConfirmFrame(sequence - 1, run_length > 1, run_ack))
                    run_length = 0
            else:
                break
            sequence += 1
        if run_length:
            frames.append(ConfirmFrame(sequence - 1, run_length > 1, run_ack))
        self._confirmed_upto = sequence - 1
        for beyond_gap in sorted(settled):
            frames.append(ConfirmFrame(beyond_gap, False, settled[beyond_gap]))
            sent_alone.add(beyond_gap)
        settled.clear()
        return frames
