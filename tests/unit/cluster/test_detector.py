"""The failure detector: suspicion from missed heartbeats, failure only from the store's clock.

MQ 4.1 HA guide: "imq.cluster.heartbeat.threshold specifies the number of missed heartbeat
intervals after which a broker is considered suspect of failure. [...] If the broker fails to
update its state within the number of monitor intervals specified by
imq.cluster.monitor.threshold, the broker is considered to have failed."
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from batonmq.cluster.detector import Cleared, Failed, FailureDetector, Health, Heard, Suspected


def detector() -> FailureDetector:
    """The HA guide's Table 6 defaults: heartbeats every 2 s, 3 missed make a suspect; the store
    stamp every 30 s, 2 missed make a failure."""
    return FailureDetector(
        heartbeat_interval=2, heartbeat_threshold=3, monitor_interval=30, monitor_threshold=2
    )


def test_a_peer_heard_every_interval_is_never_suspect() -> None:
    watcher = detector()
    watcher.members({"B": 1}, now=0)
    for second in range(0, 100, 2):
        assert watcher.heartbeat("B", now=second) == ([Heard("B", 1)] if second == 0 else [])
        assert watcher.tick(now=second + 1) == []
    assert watcher.health("B") is Health.ALIVE


def test_threshold_missed_heartbeats_make_a_suspect_once() -> None:
    watcher = detector()
    watcher.members({"B": 1}, now=0)
    watcher.heartbeat("B", now=10)

    assert watcher.tick(now=15.9) == []
    assert watcher.tick(now=16) == [Suspected("B")]
    assert watcher.tick(now=40) == []
    assert watcher.health("B") is Health.SUSPECT


def test_a_heartbeat_clears_a_suspect() -> None:
    watcher = detector()
    watcher.members({"B": 1}, now=0)
    watcher.tick(now=6)

    assert watcher.heartbeat("B", now=7) == [Heard("B", 1), Cleared("B")]
    assert watcher.health("B") is Health.ALIVE
    assert watcher.tick(now=12.9) == []
    assert watcher.tick(now=13) == [Suspected("B")]


def test_a_suspect_fails_only_when_the_store_says_it_is_silent_past_the_threshold() -> None:
    """The store's clock decides: 59 s of silence there is not yet 2 monitor intervals of 30 s."""
    watcher = detector()
    watcher.members({"B": 1}, now=0)
    watcher.tick(now=6)

    assert watcher.store_reading("B", silent_for=59.0, now=0) == []
    assert watcher.health("B") is Health.SUSPECT
    assert watcher.store_reading("B", silent_for=60.0, now=0) == [Failed("B", 60.0)]
    assert watcher.health("B") is Health.FAILED
    assert watcher.store_reading("B", silent_for=90.0, now=0) == []


def test_a_live_store_stamp_keeps_a_silent_peer_from_failing() -> None:
    """A broken heartbeat link is not a failure while the peer goes on writing in the store."""
    watcher = detector()
    watcher.members({"B": 1}, now=0)
    watcher.tick(now=6)
    for second in range(6, 3600, 30):
        assert watcher.tick(now=second) == []
        assert watcher.store_reading("B", silent_for=12.0, now=0) == []
    assert watcher.health("B") is Health.SUSPECT


def test_a_reading_of_a_peer_that_is_not_suspect_is_stale() -> None:
    watcher = detector()
    watcher.members({"B": 1}, now=0)

    assert watcher.store_reading("B", silent_for=1000.0, now=0) == []
    assert watcher.store_reading("unknown", silent_for=1000.0, now=0) == []
    assert watcher.health("B") is Health.ALIVE


def test_a_failed_peer_is_not_revived_by_a_late_heartbeat() -> None:
    """A failed broker is fenced by its takeover; it may only come back as a new member."""
    watcher = detector()
    watcher.members({"B": 1}, now=0)
    watcher.tick(now=6)
    watcher.store_reading("B", silent_for=60.0, now=0)

    assert watcher.heartbeat("B", now=70) == []
    assert watcher.health("B") is Health.FAILED


def test_a_new_member_gets_a_full_threshold_from_when_it_is_listed() -> None:
    watcher = detector()
    watcher.members({"B": 1}, now=0)
    watcher.members({"B": 1, "C": 1}, now=100)

    assert watcher.tick(now=105) == [Suspected("B")]
    assert watcher.tick(now=106) == [Suspected("C")]


def test_a_member_no_longer_listed_is_forgotten_and_no_longer_watched() -> None:
    watcher = detector()
    watcher.members({"B": 1, "C": 1}, now=0)
    watcher.tick(now=6)

    assert watcher.members({"C": 1}, now=7) == [Cleared("B")]
    assert watcher.health("B") is None
    assert watcher.heartbeat("B", now=8) == []


def test_the_stores_outage_is_not_counted_as_a_peers_silence() -> None:
    """While the store is away no member can update its state there, so once it is back the
    store's clock shows every member silent, a live one too until it writes again (one that
    joined just before the outage, not heard yet, among them): the seconds of the outage are
    not the peer's silence. MQ 4.1 HA guide: a suspect broker has failed if it "fails to
    update its state within the number of monitor intervals" (here: 60 s); in an outage it
    could not. From the last reading before it to the first after: 10 s to 100 s."""
    watcher = detector()
    watcher.members({"B": 1}, now=10)
    assert watcher.tick(now=16) == [Suspected("B")]
    watcher.store_lost()
    watcher.store_lost()  # each failed round: the outage began after the reading at 10
    watcher.members({"B": 1}, now=100)

    # Silent in the store since 5 s before the outage: 5 + 30 s of its own, not 125.
    assert watcher.store_reading("B", silent_for=125.0, now=130) == []
    # Silent since 5 s before the outage: 5 + 55 s after it, the monitor threshold.
    assert watcher.store_reading("B", silent_for=150.0, now=155) == [Failed("B", 150.0)]


def test_two_outages_close_together_are_both_taken_off() -> None:
    """The store out from 28 s to 100 s, back for a moment, out again to 110 s: a peer that
    last wrote at 0 (it renews every 30 s) and could write at no time between has been silent
    28 s of its own, not the 100 s the last outage alone would leave."""
    watcher = detector()
    watcher.members({"B": 1}, now=28)  # listed here at 28, never heard: suspect at 34
    watcher.tick(now=34)
    watcher.store_lost()
    watcher.members({"B": 1}, now=100)
    watcher.store_lost()
    watcher.members({"B": 1}, now=110)

    assert watcher.health("B") is Health.SUSPECT
    assert watcher.store_reading("B", silent_for=110.0, now=110) == []
    assert watcher.store_reading("B", silent_for=142.0, now=142) == [Failed("B", 142.0)]


def test_a_peer_whose_takeover_met_a_store_error_is_taken_over_later() -> None:
    """A failed peer whose takeover raised a store error (the store went away as it began) may
    not have been claimed: it is watched anew and, silent still, failed and taken over again,
    rather than left failed, and never taken over, for as long as it keeps its epoch."""
    watcher = FailureDetector(
        heartbeat_interval=1, heartbeat_threshold=2, monitor_interval=1, monitor_threshold=2
    )
    watcher.members({"B": 1, "C": 1}, now=0)
    watcher.tick(now=2)
    assert watcher.store_reading("B", silent_for=2.0, now=2) == [Failed("B", 2.0)]
    assert watcher.store_reading("C", silent_for=2.0, now=2) == [Failed("C", 2.0)]
    watcher.store_lost()  # the takeover of B raised: C's was not even tried

    failed = []
    for now in range(3, 10):
        watcher.members({"B": 1, "C": 1}, now)
        watcher.tick(now)
        failed += watcher.store_reading("B", silent_for=now, now=now)
        failed += watcher.store_reading("C", silent_for=now, now=now)
    assert failed == [Failed("B", 5.0), Failed("C", 5.0)]


def test_an_outage_long_before_a_peers_silence_takes_nothing_off_it() -> None:
    """Only the part of the outage inside the silence counts: a peer that fell silent after
    the store came back fails after the monitor threshold, however long the outage was."""
    watcher = detector()
    watcher.members({"B": 1}, now=0)
    watcher.store_lost()
    watcher.members({"B": 1}, now=1000)
    watcher.tick(now=2000)

    assert watcher.store_reading("B", silent_for=60.0, now=2000) == [Failed("B", 60.0)]


@given(st.sets(st.integers(0, 299), max_size=200) | st.just(set(range(3, 300, 3))))
def test_a_dead_peer_fails_however_often_the_store_goes_away(lost_rounds: set[int]) -> None:
    """A store that goes away now and then, even every other round, delays the takeover of a
    peer that died by no more than its outages inside the peer's silence; one that never
    comes back for long (failing every round it can) is the only thing that stops it. Rounds
    each second, as a member's: heartbeats 1 s, threshold 2; monitor 1 s, threshold 2."""
    watcher = FailureDetector(
        heartbeat_interval=1, heartbeat_threshold=2, monitor_interval=1, monitor_threshold=2
    )
    watcher.members({"B": 1}, now=0)
    died = 10  # its last heartbeat and its last store update
    failed_at = None
    for now in range(1, 400):
        if now <= died:
            watcher.heartbeat("B", now)
        if now in lost_rounds:
            watcher.store_lost()
            continue
        watcher.members({"B": 1}, now)
        watcher.tick(now)
        if watcher.store_reading("B", silent_for=now - died, now=now):
            failed_at = now
            break
    # Suspect after 2 s, failed once 2 s of its silence fall outside the last outage: by
    # the third round after the last failed one, at the latest.
    assert failed_at is not None
    assert failed_at <= max(max(lost_rounds, default=0), died) + 3
    if lost_rounds == set(range(3, 300, 3)):  # every third round: 4 s after it died
        assert failed_at == died + 4


def test_fast_settings_detect_a_failure_within_their_thresholds() -> None:
    """With heartbeats every second, threshold 2, and the store stamp every second, threshold 2,
    a broker killed at t=0 is suspect at 2 s and failed at the first reading past 2 s of silence
    in the store."""
    watcher = FailureDetector(
        heartbeat_interval=1, heartbeat_threshold=2, monitor_interval=1, monitor_threshold=2
    )
    watcher.members({"B": 1}, now=-5)
    watcher.heartbeat("B", now=0)

    effects = [effect for t in (0.5, 1.0, 1.5, 2.0, 2.5) for effect in watcher.tick(now=t)]
    assert effects == [Suspected("B")]
    assert watcher.store_reading("B", silent_for=2.5, now=0) == [Failed("B", 2.5)]


events = st.lists(
    st.one_of(
        st.tuples(st.just("heartbeat"), st.sampled_from("BC"), st.floats(0, 50)),
        st.tuples(st.just("tick"), st.just(""), st.floats(0, 50)),
        st.tuples(st.just("reading"), st.sampled_from("BC"), st.floats(0, 59.99)),
        st.tuples(st.just("members"), st.sampled_from(["B", "C", "BC", ""]), st.floats(0, 50)),
    ),
    max_size=60,
)


@given(events)
def test_no_peer_fails_while_the_store_shows_it_within_the_threshold(
    history: list[tuple[str, str, float]],
) -> None:
    """Whatever heartbeats are lost and however the members change, a peer whose store stamp is
    never older than the monitor threshold is never failed: the store's clock decides."""
    watcher = detector()
    now = 0.0
    for kind, peers, value in history:
        if kind == "heartbeat":
            now += value
            effects = watcher.heartbeat(peers, now)
        elif kind == "tick":
            now += value
            effects = watcher.tick(now)
        elif kind == "reading":
            effects = watcher.store_reading(peers, silent_for=value, now=0)
        else:
            effects = watcher.members(dict.fromkeys(peers, 1), now)
        assert not any(isinstance(effect, Failed) for effect in effects)


def test_a_failed_peer_whose_claim_was_lost_is_watched_anew() -> None:
    """A takeover that another survivor won, or that the peer's own store update beat (the
    store decides), leaves the peer to be judged again from the start: a full heartbeat
    threshold before it is suspect, and a store reading before it fails."""
    watcher = detector()
    watcher.members({"B": 1}, now=0)
    watcher.tick(now=6)
    assert watcher.store_reading("B", silent_for=60, now=0) == [Failed("B", 60)]

    watcher.claim_lost("B", now=100)

    assert watcher.health("B") is Health.ALIVE
    assert watcher.tick(now=105.9) == []
    assert watcher.tick(now=106) == [Suspected("B")]
    assert watcher.store_reading("B", silent_for=60, now=0) == [Failed("B", 60)]


def test_a_failed_peer_that_joined_again_before_the_list_was_read_is_watched_anew() -> None:
    """A takeover completes and the member taken over starts again and rejoins (claiming a new
    fencing epoch) before this broker next reads the member list: it never saw the member
    listed as taken over, yet the member is a new one and is watched again. Held as failed, its
    heartbeats were ignored and its next failure was never detected (HA guide: "When a broker
    fails, another broker in the cluster takes over its persistent data")."""
    watcher = detector()
    watcher.members({"B": 1}, now=0)
    watcher.tick(now=6)
    assert watcher.store_reading("B", silent_for=60, now=0) == [Failed("B", 60)]

    watcher.members({"B": 3}, now=100)  # taken over (epoch 2), then joined again (epoch 3)

    assert watcher.health("B") is Health.ALIVE
    assert watcher.heartbeat("B", now=101) == [Heard("B", 3)]
    assert watcher.tick(now=106.9) == []
    assert watcher.tick(now=107) == [Suspected("B")]
    assert watcher.store_reading("B", silent_for=60, now=0) == [Failed("B", 60)]


def test_a_member_listed_again_with_the_same_epoch_keeps_its_state() -> None:
    """Reading the list again changes nothing for a member that did not join again."""
    watcher = detector()
    watcher.members({"B": 1}, now=0)
    assert watcher.tick(now=6) == [Suspected("B")]

    assert watcher.members({"B": 1}, now=7) == []
    assert watcher.health("B") is Health.SUSPECT


def test_a_member_is_heard_once_per_epoch() -> None:
    """MQ 4.1 HA guide: "Brokers within an HA cluster periodically inform each other that they
    are still in operation by exchanging heartbeat packets". The first heartbeat of a member
    listed with an epoch says it is heard, and no later one does, whatever happens to it in
    between (suspect and cleared, failed and its claim lost, listed again); listed with a new
    epoch (it joined again), its first heartbeat says so again."""
    watcher = detector()
    watcher.members({"B": 7}, now=0)

    assert watcher.heartbeat("B", now=1) == [Heard("B", 7)]
    assert watcher.heartbeat("B", now=3) == []
    assert watcher.tick(now=9) == [Suspected("B")]
    assert watcher.heartbeat("B", now=10) == [Cleared("B")]
    assert watcher.members({"B": 7}, now=11) == []
    watcher.tick(now=16)
    assert watcher.store_reading("B", silent_for=60, now=0) == [Failed("B", 60)]
    watcher.claim_lost("B", now=17)
    assert watcher.heartbeat("B", now=18) == []

    watcher.members({"B": 8}, now=20)

    assert watcher.heartbeat("B", now=21) == [Heard("B", 8)]
    assert watcher.heartbeat("B", now=23) == []
