"""Settings that protect the broker and warn its operator: limits, memory and disk, slow consumers,
threshold alerts, and auto-created queues."""

from __future__ import annotations

from dataclasses import dataclass

from batonmq.config.checks import between, one_of, positive_finite, setting


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    """Limits on what clients may hold open (the Overload requirements, "Other limits"); 0 means
    unlimited.

    The seeds name none of these, so they follow RabbitMQ: its per-virtual-host and per-user
    ``max-connections`` limits and its ``consumer_max_per_channel`` setting, refused as RabbitMQ
    refuses them, with 530 NOT_ALLOWED, which closes the connection. Unlike RabbitMQ's vhost
    limit, where 0 refuses every connection, 0 here is "no limit", as for RabbitMQ's
    ``channel_max``. Channels per connection are limited by ``amqp.channel_max``, negotiated in
    connection.tune; a per-user channel limit (RabbitMQ's user ``max-channels``) is not offered:
    ``max_connections_per_user`` times ``amqp.channel_max`` bounds a user's channels.
    """

    #: Open connections one user may have on this broker, across virtual hosts.
    max_connections_per_user: int = setting(0, check=between(0))
    #: Open connections to one virtual host on this broker, whoever the users.
    max_connections_per_vhost: int = setting(0, check=between(0))
    #: Consumers one channel may have at once (RabbitMQ consumer_max_per_channel).
    max_consumers_per_channel: int = setting(0, check=between(0))
    #: Messages the broker holds in all its queues together (MQ 3.5 admin guide Table 2-4,
    #: imq.system.max_count); a publish beyond it is refused. The largest message is
    #: ``amqp.max_message_size`` (imq.message.max_size).
    max_messages: int = setting(0, check=between(0))
    #: Body bytes the broker holds in all its queues together (imq.system.max_size).
    max_bytes: int = setting(0, check=between(0))


@dataclass(frozen=True, slots=True)
class SlowConsumerConfig:
    """Slow consumer detection (Qpid manual §2.11, §1.5.2): a consumer whose subscription queue (a
    queue bound to a topic or fanout exchange) backs up past a threshold has its connection
    closed with 506 RESOURCE_ERROR. 0 turns a threshold off."""

    #: Check subscription queues at all (Qpid manual §2.11.3.1 slow-consumer-detection).
    enabled: bool = setting(False)
    #: Seconds between checks (the seed's delay and timeunit, 60 seconds in its example).
    delay: float = setting(60.0, check=positive_finite)
    #: Bytes of ready messages in the queue above which its consumers are slow (<depth>).
    depth: int = setting(0, check=between(0))
    #: Milliseconds the oldest message in the queue may wait before its consumers are slow
    #: (<messageAge>).
    message_age: int = setting(0, check=between(0))
    #: Messages in the queue above which its consumers are slow (<messageCount>).
    message_count: int = setting(0, check=between(0))
    #: Binding keys ("topic names"), space-separated, whose subscription queues are checked,
    #: matched by straight string comparison (§1.5.2.3); empty checks every subscription queue.
    topics: str = setting("")
    #: Also delete a slow consumer's durable subscription queue (<topicDelete>
    #: <delete-persistent/>); temporary ones (exclusive or auto-delete) always go.
    delete_persistent: bool = setting(False)


@dataclass(frozen=True, slots=True)
class AlertsConfig:
    """Threshold alerts (Qpid manual "Set threshold values for queue monitor alerting to log"):
    a warning in the log when a queue goes over one; 0 turns a threshold off."""

    #: Bytes of ready messages in a queue (maximumQueueDepth).
    max_queue_depth: int = setting(0, check=between(0))
    #: Bytes of one message body (maximumMessageSize).
    max_message_size: int = setting(0, check=between(0))
    #: Milliseconds the oldest message of a queue has waited (maximumMessageAge).
    max_message_age: int = setting(0, check=between(0))
    #: Messages in a queue (maximumMessageCount).
    max_message_count: int = setting(0, check=between(0))
    #: Seconds between checks of every queue.
    interval: float = setting(30.0, check=positive_finite)
    #: Seconds before an alert that still holds is logged again (Qpid's minimumAlertRepeatGap,
    #: 30 s); a queue that went back under alerts again as soon as it is over.
    repeat_gap: float = setting(30.0, check=positive_finite)


MEMORY_STATES = ("green", "yellow", "orange", "red")


@dataclass(frozen=True, slots=True)
class MemoryConfig:
    """Memory thresholds (MQ 3.5 admin guide Table 2-4: imq.{green,yellow,orange,red}.threshold and
    .count): the broker's resident memory as a percentage of ``budget`` sets its state; each
    state lets a publishing connection run at most ``*_count`` messages before its input waits
    a turn, and red (count 0) blocks every publisher with connection.blocked."""

    #: Bytes of memory the broker may use; 0 means 40% of the machine's RAM (RabbitMQ's
    #: default vm_memory_high_watermark).
    budget: int = setting(0, check=between(0))
    yellow_threshold: int = setting(80, check=between(1, 100))
    orange_threshold: int = setting(90, check=between(1, 100))
    red_threshold: int = setting(98, check=between(1, 100))
    green_count: int = setting(5000, check=between(1))
    yellow_count: int = setting(500, check=between(1))
    orange_count: int = setting(50, check=between(1))
    #: Seconds between readings of the broker's memory.
    check_interval: float = setting(0.25, check=positive_finite)


@dataclass(frozen=True, slots=True)
class DiskConfig:
    """Disk quota (Qpid manual §1.5.1.2.2) and the free-disk alarm."""

    #: Bytes the store may use before every producer is blocked (MST-1008); 0: no quota.
    store_overfull: int = setting(0, check=between(0))
    #: Producers are released when the store is back under this (MST-1009); 0: the overfull
    #: size.
    store_underfull: int = setting(0, check=between(0))
    #: Free bytes on the data directory's disk below which every producer is blocked
    #: (RabbitMQ's disk_free_limit, 50 MB); 0: no alarm.
    free_limit: int = setting(50_000_000, check=between(0))
    #: Seconds between checks of the store's size and the free disk space.
    check_interval: float = setting(1.0, check=positive_finite)


LIMIT_BEHAVIORS = ("FLOW_CONTROL", "REMOVE_OLDEST", "REMOVE_LOW_PRIORITY", "REJECT_NEWEST")


@dataclass(frozen=True, slots=True)
class AutocreateConfig:
    """Auto-created queues (MQ 3.5 admin guide Table 2-10, imq.autocreate.*): the queues clients
    declare whose names match ``pattern`` (a regular expression, as in a RabbitMQ policy; empty
    matches none) get these limits unless their declare sets its own, and are deleted once they
    have had no consumers and no messages for ``delete_after`` seconds. 0 means no limit."""

    pattern: str = setting("")
    #: imq.autocreate.destination.maxNumMsgs
    max_messages: int = setting(0, check=between(0))
    #: imq.autocreate.destination.maxTotalMsgBytes
    max_bytes: int = setting(0, check=between(0))
    #: imq.autocreate.destination.limitBehavior
    limit_behavior: str = setting("REJECT_NEWEST", check=one_of(*LIMIT_BEHAVIORS))
    #: imq.autocreate.destination.maxBytesPerMsg
    max_message_size: int = setting(0, check=between(0))
    #: imq.autocreate.destination.maxNumProducers
    max_producers: int = setting(0, check=between(0))
    #: imq.autocreate.queue.maxNumActiveConsumers and maxNumBackupConsumers
    max_active_consumers: int = setting(0, check=between(0))
    max_backup_consumers: int = setting(0, check=between(0))
    #: Seconds an auto-created queue may be unused (no consumers, no messages); 0: kept.
    delete_after: float = setting(120.0, check=between(0))
