"""The catalogue of the broker's operational log lines: a stable code for each line an operator
may see, what it means and what to do, as the Sun MQ broker's coded log messages and Qpid's
operational log message ids give them.

A line's code is found from the start of its message (the fixed text before its first
variable part), so that the code stays the same whatever the values in the line; the formatters
of `batonmq.log` write it as the `logcode` field. `docs/log-codes.md` is this catalogue as a
table (`python -m batonmq.logcodes` writes it; a test keeps the two equal), and a test checks
that every log call in the source has a code here.

Codes by area: BMQ-1xxx the broker's life, 2xxx connections and clients, 3xxx queues and
messages, 4xxx the store, 5xxx memory and disk, 6xxx management, 7xxx clusters, 8xxx streams.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class LogCode:
    code: str
    #: The fixed start of the message (its text before the first value).
    starts: str
    meaning: str
    action: str


def _code(code: str, starts: str, meaning: str, action: str = "None.") -> LogCode:
    return LogCode(code, starts, meaning, action)


CATALOGUE: Final = (
    # The broker's life.
    _code("BMQ-1001", "broker started", "The broker process started; its pid is given."),
    _code("BMQ-1002", "listening", "A listener accepts connections on the address given."),
    _code(
        "BMQ-1003",
        "recovered ",
        "The store was read at start: messages, queues and the time it took.",
        "If unclean_stop is true, the broker had not stopped cleanly: messages that were "
        "delivered and not acknowledged are marked redelivered.",
    ),
    _code("BMQ-1004", "shutting down", "SIGTERM or SIGINT: clients are being closed."),
    _code("BMQ-1005", "shutdown complete", "Everything pending was committed; the process exits."),
    _code(
        "BMQ-1006",
        "stopping: ",
        "The broker stops because it cannot go on (its store was taken over, or failed).",
        "Read the reason; restart the broker once it is addressed.",
    ),
    _code(
        "BMQ-1007",
        "cannot start: ",
        "The broker did not start: a configuration, TLS or ACL error named in the line.",
        "Correct the setting or file named and start again.",
    ),
    _code(
        "BMQ-1008",
        "cannot open the store: ",
        "The store could not be opened (in use by another broker, unreachable, too new).",
        "Check the store's location or PostgreSQL server and the broker holding it.",
    ),
    _code(
        "BMQ-1009",
        "cannot listen on ",
        "A listener's address is in use or not allowed.",
        "Free the port or change the listener's bind and port.",
    ),
    _code(
        "BMQ-1010",
        "periodic task ",
        "A periodic task of the broker failed once; it runs again at its next interval.",
        "A defect: report it with the traceback.",
    ),
    _code(
        "BMQ-1011",
        "timer ",
        "A timer's callback failed; the other timers go on.",
        "A defect: report it with the traceback.",
    ),
    _code("BMQ-1012", "expired ", "The expiry sweep removed messages past their time to live."),
    _code("BMQ-1013", "ACL reloaded", "SIGHUP: the ACL file was read again and is in force."),
    _code(
        "BMQ-1014",
        "ACL reload failed, keeping the old rules: ",
        "SIGHUP: the ACL file has an error; the rules read before stay in force.",
        "Correct the file at the line named and send SIGHUP again.",
    ),
    _code("BMQ-1015", "ACL ", "An ACL decision the rules ask to log (audit log).", "Review it."),
    _code(
        "BMQ-1016",
        "quiesced: ",
        "quiesce bkr: new client connections are refused, the open ones (counted) are served.",
        "Unquiesce the broker, or shut it down once its clients have gone.",
    ),
    _code("BMQ-1017", "unquiesced: ", "unquiesce bkr: new client connections are accepted again."),
    _code(
        "BMQ-1018",
        "shutdown in ",
        "shutdown bkr --time N: the broker serves on for the seconds given, then shuts down "
        "(at the time given; with no failover if nofailover is true).",
        "None; to keep it running, restart it before then.",
    ),
    _code(
        "BMQ-1019",
        "shutdown after ",
        "A shutdown asked for with --time and --nofailover was not done: the broker's record in "
        "the shared store could not say no failover, so it goes on serving.",
        "Check the store named in the line, then ask for the shutdown again.",
    ),
    _code(
        "BMQ-1020",
        "worker started",
        "A worker process of a broker with broker.workers above 1 serves; its index and pid.",
    ),
    _code(
        "BMQ-1021",
        "worker died; restarting",
        "A worker process ended without being asked to (its exit status, or minus the signal "
        "that ended it); the supervisor starts it again after the delay given, and it recovers "
        "its virtual hosts from the store. The other workers and their clients go on.",
        "Read that worker's last lines (worker=<index>) for the cause.",
    ),
    _code(
        "BMQ-1022",
        "worker did not stop in time; killed",
        "At shutdown a worker was still running after twice server.shutdown_timeout.",
        "Read that worker's last lines; messages it confirmed are in the store.",
    ),
    _code(
        "BMQ-1023",
        "worker ",
        "A worker process failed with an unexpected error (traceback in the line).",
        "Report it; the supervisor starts the worker again.",
    ),
    _code(
        "BMQ-1030",
        "worker not tied to the supervisor: ",
        "The kernel refused to end this worker with its supervisor (prctl PR_SET_PDEATHSIG): "
        "if the `batonmq` process is killed, this worker goes on, holding the port and the "
        "store.",
        "If the `batonmq` process ends abnormally, stop its workers (their pids are in the "
        '"worker started" lines) before starting the broker again.',
    ),
    _code(
        "BMQ-1040",
        "sibling packet unreadable; dropped",
        "A worker read a packet on its control inbox that is not one of the link between "
        "workers (a bug, or a message cut short).",
        "Report it with the lines around it.",
    ),
    _code(
        "BMQ-1041",
        "sibling request failed",
        "A worker failed to answer a request of another worker of the broker (traceback in "
        "the line); the management API answered without it, or with a 503.",
        "Report it with the traceback.",
    ),
    _code(
        "BMQ-1042",
        "peer link up",
        "A worker's link with another worker of the broker (peer, and the peer process's start "
        "id) is up: at start, or once a worker started again serves.",
    ),
    _code(
        "BMQ-1043",
        "peer link down",
        "A worker's link with another worker ended (the reason is given): the peer ended, "
        "or stops. A restarted peer makes the link again (BMQ-1042).",
        "If no BMQ-1042 line for that peer follows, look for its end (BMQ-1021).",
    ),
    _code(
        "BMQ-1044",
        "peer link record not understood; link closed",
        "A worker read on its link with another worker what that link does not carry (a bug); "
        "it closed the link.",
        "Report it with the lines around it.",
    ),
    _code(
        "BMQ-1045",
        "peer link not made: ",
        "A worker could not send its end of a link to another worker's inbox (the reason is "
        "given): the pair has no link until one of the two starts again.",
        "Report it with the lines around it.",
    ),
    _code(
        "BMQ-1046",
        "the other workers were not told of a change of a queue: ",
        "A worker removed a queue it runs in a virtual host spread over the workers "
        "(auto-delete, x-expires, its exclusive connection closed), or the home worker found "
        "that a worker that started again runs other queues than its copy said, and the home "
        "could not tell the others (the reason is given): their copies keep the old queue "
        "until their links with the home are made again.",
        "If the home worker's link is down, look for its end or restart (BMQ-1043).",
    ),
    _code(
        "BMQ-1047",
        "an exclusive queue another worker runs was not deleted: ",
        "A connection closed whose exclusive queue runs on another worker of a virtual host "
        "spread over the workers, and that worker could not be asked to delete it (the reason "
        "is given): it stays until its worker's process ends or it is deleted by name.",
        "If the home worker's link is down, look for its end or restart (BMQ-1043); delete "
        "the queue by name.",
    ),
    _code(
        "BMQ-1048",
        "a request waiting for the topology's sync failed",
        "A change of a virtual host spread over the workers that waited for the home worker's "
        "sync raised when the sync came; the other waiting changes went on. The traceback "
        "follows.",
        "Report it with the traceback.",
    ),
    _code(
        "BMQ-1049",
        "the stored bindings to a queue that went are not deleted yet",
        "The home worker of a virtual host spread over the workers could not write the "
        "deletion of the stored bindings to a queue that its owner deleted; the queue is gone "
        "everywhere all the same, and the journal writes the deletion again with its next "
        "batch.",
        "See the store's own lines (store write failed).",
    ),
    _code(
        "BMQ-1060",
        "counting failed logins, connections and repeated lines in this worker until the first "
        "answers",
        "A worker of a broker with several got no answer from the first worker, which counts "
        "failed logins (the lockout), open connections (the connection limits) and repeated "
        "log lines for the broker: until it answers again, this worker counts its own, so a "
        "lockout and a connection limit hold per worker.",
        "Look for the first worker's end or restart (worker=0) in the lines before.",
    ),
    _code(
        "BMQ-1061",
        "counting failed logins, connections and repeated lines in the first worker again",
        "The first worker answers again: failed logins, connections and repeated lines are "
        "counted for the whole broker again (this worker gives it the connections it holds).",
    ),
    _code(
        "BMQ-1062",
        "settlement across of deliveries not unsettled here, passed over",
        "The worker that runs a queue was asked by another worker to settle deliveries (how "
        "many is given) it no longer holds for it: it took them back meanwhile (a single "
        "active consumer it cancelled, whose work went to the next). The others named are "
        "settled; the consumers on the link go on.",
        "None, unless it repeats: then report it with the lines around it.",
    ),
    # Connections and clients.
    _code("BMQ-2001", "connection opened", "A client logged in and opened a virtual host."),
    _code(
        "BMQ-2002",
        "connection closed",
        "A connection ended: by the client, or by the broker with the reply code and reason "
        "given. Repeats from one host are counted (x N in the last S s).",
        "A broker close with an error code names what the client did wrong.",
    ),
    _code(
        "BMQ-2003",
        "connection blocked: ",
        "Publishers are held (connection.blocked): memory or disk alarm.",
        "See the alarm's line (BMQ-5xxx).",
    ),
    _code("BMQ-2004", "connection unblocked", "The alarm cleared; publishers go on."),
    _code(
        "BMQ-2016",
        "channel closed by broker",
        "The broker closed a channel with the reply code and reason given (a soft error: the "
        "client's request was refused). Repeats from one host are counted.",
        "The reason names what the client asked that was refused.",
    ),
    _code(
        "BMQ-2005",
        "internal error in ",
        "A method failed inside the broker; the connection was closed with 541.",
        "A defect: report it with the traceback.",
    ),
    _code(
        "BMQ-2006",
        "internal error; aborting connection",
        "A connection's data could not be handled; the connection was dropped.",
        "A defect: report it with the traceback.",
    ),
    _code(
        "BMQ-2007",
        "cannot accept a connection: ",
        "The listener could not accept (out of file descriptors, for one).",
        "Raise the process's open file limit or lower limits.max_connections.",
    ),
    _code(
        "BMQ-2008",
        "TLS handshake failed",
        "A TLS handshake failed inside the broker.",
        "A defect: report it with the traceback.",
    ),
    _code(
        "BMQ-2009",
        "TLS handshake refused: ",
        "A client's TLS handshake was refused (no or untrusted certificate, protocol).",
        "Check the client's certificate and TLS version against the listener's settings.",
    ),
    _code("BMQ-2010", "TLS handshake not completed", "A client left during the TLS handshake."),
    _code(
        "BMQ-2011",
        "login locked out after ",
        "Too many failed logins from one host for one user: its logins are refused a while.",
        "Check the client's credentials; look for password guessing.",
    ),
    _code(
        "BMQ-2012",
        "CHN-1005 : Flow Control Enforced",
        "A channel's publishes are held: a queue it publishes to is over its capacity.",
        "Consume from the queue named, or raise its capacity.",
    ),
    _code("BMQ-2013", "CHN-1006 : Flow Control Removed", "The channel may publish again."),
    _code(
        "BMQ-2014",
        "slow consumer disconnected: ",
        "A consumer fell behind its subscription's limits and its connection was closed.",
        "Speed up the consumer or raise the [slow_consumer] limits.",
    ),
    _code(
        "BMQ-2015",
        "slow consumer's subscription queue deleted",
        "The durable subscription queue of a slow consumer was deleted "
        "(slow_consumer.delete_persistent).",
    ),
    _code(
        "BMQ-2019",
        "connection not handed to its worker; closed",
        "The worker that accepted a connection could not pass it to the worker that owns its "
        "virtual host (the reason is given); the client's socket was closed, and it may "
        "connect again.",
        "If it repeats, check that the owner worker runs (BMQ-1021 lines).",
    ),
    _code(
        "BMQ-2020",
        "connection handed over unreadable; closed",
        "A worker received a connection from another that it could not read; it was closed.",
        "Report it.",
    ),
    _code(
        "BMQ-2021",
        "handed connection gone: ",
        "A client left while its connection was passed to the worker that owns its virtual host.",
    ),
    # Queues and messages.
    _code(
        "BMQ-3001",
        "QUE-1003 : Overfull",
        "A queue went over its capacity: its publishers are held (flow control).",
        "Consume from it, or raise x-qpid-capacity.",
    ),
    _code("BMQ-3002", "QUE-1004 : Underfull", "The queue went below its resume capacity."),
    _code(
        "BMQ-3003",
        "QUEUE_DEPTH_ALERT",
        "A queue holds more bytes than alerts.max_queue_depth.",
        "Consume from it, or raise the threshold.",
    ),
    _code(
        "BMQ-3004",
        "MESSAGE_SIZE_ALERT",
        "A message larger than alerts.max_message_size was enqueued.",
        "Find the publisher of the queue named.",
    ),
    _code(
        "BMQ-3005",
        "MESSAGE_AGE_ALERT",
        "A queue's oldest message is older than alerts.max_message_age.",
        "Consume from it, or raise the threshold.",
    ),
    _code(
        "BMQ-3006",
        "MESSAGE_COUNT_ALERT",
        "A queue holds more messages than alerts.max_message_count.",
        "Consume from it, or raise the threshold.",
    ),
    _code(
        "BMQ-3007",
        "auto-created queue deleted",
        "An auto-created queue had no consumers and no messages for autocreate.delete_after.",
    ),
    _code(
        "BMQ-3008",
        "dead-lettering message ",
        "A message could not be dead-lettered and was dropped.",
        "A defect: report it with the traceback.",
    ),
    _code(
        "BMQ-3009",
        "expiry of queue ",
        "A queue's expiry work failed; other queues are not delayed.",
        "A defect: report it with the traceback.",
    ),
    _code(
        "BMQ-3010",
        "cleanup step failed: ",
        "One step of a channel's or connection's cleanup failed; the rest went on.",
        "A defect: report it with the traceback.",
    ),
    _code(
        "BMQ-3011",
        "event subscriber failed",
        "A subscriber of the event feed failed; it stays subscribed.",
        "A defect: report it with the traceback.",
    ),
    _code(
        "BMQ-3012",
        "queue argument ignored: ",
        "A stored queue has an argument this release does not take; the queue is served "
        "without it.",
        "Delete and declare the queue again with valid arguments.",
    ),
    _code(
        "BMQ-3013",
        "binding not restored",
        "A stored binding could not be restored at start (an end missing, or invalid).",
        "Bind again if it is still wanted.",
    ),
    _code(
        "BMQ-3014",
        "user cannot log in: bad stored credential: ",
        "A user's stored password hash is damaged; the user cannot log in.",
        "Set the user's password again (batonctl user passwd).",
    ),
    # The store.
    _code(
        "BMQ-4001",
        "message quarantined: ",
        "A stored message failed its integrity check and will not be delivered.",
        "Inspect quarantined_messages in the store; restore from a backup if needed.",
    ),
    _code(
        "BMQ-4002",
        "store write failed at shutdown: ",
        "Acknowledgements and deliveries could not be written while stopping: those messages "
        "are delivered again after the restart.",
        "Check the store (disk, PostgreSQL server).",
    ),
    _code(
        "BMQ-4003",
        "store write failed: ",
        "A commit to the store failed: publishers got nacks, declares errors; it is retried. "
        "Repeats are counted.",
        "Check the disk or the PostgreSQL server named by store.",
    ),
    _code(
        "BMQ-4004",
        "store read failed: ",
        "Reading paged-out messages failed; it is retried.",
        "Check the disk or the PostgreSQL server named by store.",
    ),
    _code(
        "BMQ-4005",
        "journal callback failed",
        "A waiter for a commit failed; later commits go on.",
        "A defect: report it with the traceback.",
    ),
    _code(
        "BMQ-4006",
        "persist.postgres.durability ",
        "The durability policy asks for replica acknowledgements, but PostgreSQL names no "
        "synchronous standby, so commits wait for the primary alone.",
        "Set synchronous_standby_names on the PostgreSQL primary (README: Durability policies), "
        "or use a policy ending in NONE.",
    ),
    _code(
        "BMQ-4020",
        "virtual hosts moved to their owners",
        "The broker started on its store with another number of worker processes "
        "(broker.workers) than before: the rows and streams (SQLite: stream directories) of the "
        "virtual hosts given are now the worker's (or the one process's) that owns them.",
    ),
    # Memory and disk.
    _code(
        "BMQ-5001",
        "memory state ",
        "The broker's memory use moved between the states green, yellow, orange and red; "
        "publishers are slowed or held in the worse ones.",
        "At orange or red: consume, lower limits, or raise memory.budget.",
    ),
    _code(
        "BMQ-5002",
        "free disk space alarm set: ",
        "Free disk space is below disk.free_limit: publishers are held.",
        "Free disk space.",
    ),
    _code("BMQ-5003", "free disk space alarm cleared", "Publishers go on."),
    _code(
        "BMQ-5004",
        "MST-1008 : Store overfull",
        "The store is over disk.store_overfull: publishers are held.",
        "Consume messages or raise disk.store_overfull.",
    ),
    _code("BMQ-5005", "MST-1009 : Store overfull condition cleared", "Publishers go on."),
    _code(
        "BMQ-5006",
        "cannot measure ",
        "The store's size or the free disk space could not be read; the check is retried.",
        "Check the data directory's permissions and file system.",
    ),
    # Management.
    _code(
        "BMQ-6001",
        "HTTP access denied: ",
        "A management API request with a wrong user or password.",
        "Check the client's credentials.",
    ),
    _code(
        "BMQ-6002",
        "HTTP access refused: ",
        "A management API request the user's tags or ACL do not allow.",
        "Give the user the tag or permission, if it should have it.",
    ),
    _code(
        "BMQ-6003",
        "broker message not published",
        "A metrics or event message could not be published (a watching queue at its limits, "
        "or the store).",
        "Consume from the queues bound to amq.batonmq.metrics or amq.batonmq.events.",
    ),
    _code(
        "BMQ-6004",
        "log level changed",
        "An administrator changed the broker's log level over the management API (batonctl "
        "log level, the console): the level and the user are given. It lasts until the "
        "broker stops.",
    ),
    # The workers of an HA member.
    _code(
        "BMQ-6010",
        "takeover adopted: ",
        "A worker of a broker with several took over its share of a failed member that a "
        "sibling worker claimed: the messages of its virtual hosts, now served by it.",
    ),
    _code(
        "BMQ-6020",
        "started again quiesced",
        "A worker of a quiesced broker (quiesce bkr), started again by the supervisor after it "
        "ended, asked its siblings and refuses new client connections as they do.",
        "Unquiesce the broker to accept clients again.",
    ),
    # Clusters.
    _code(
        "BMQ-7001",
        "heartbeat connection refused",
        "A cluster heartbeat connection came from a broker of another cluster or was malformed.",
        "Check cluster.clusterid and the heartbeat addresses of the members.",
    ),
    _code(
        "BMQ-7019",
        "heartbeats refused: the TLS handshake",
        "With cluster.heartbeat.tls, the TLS handshake with a member's heartbeat service failed "
        "(its certificate is not from this broker's CA bundle, or this one not from its); logged "
        "once until heartbeats get through again.",
        "Give every member a certificate from the CA bundle the others trust "
        "(listeners.amqps.certfile, cafile).",
    ),
    _code(
        "BMQ-7002",
        "joined HA cluster",
        "The broker registered in the cluster's shared store and listens for heartbeats.",
    ),
    _code(
        "BMQ-7003",
        "cluster member suspect",
        "No heartbeat came from the member named for cluster.heartbeat.threshold intervals: "
        "its updates in the store are watched.",
        "Check the member and the network between the members' heartbeat addresses.",
    ),
    _code(
        "BMQ-7023",
        "cluster member heard: its heartbeats are watched",
        "The first heartbeat came from the member named, as the member that joined with the "
        "fencing epoch given: this broker hears it (whether it hears this broker is in its own "
        "log). Logged once per member and epoch (a member that joins again, after a restart or a "
        "takeover, is heard anew).",
    ),
    _code("BMQ-7004", "cluster member heard from again", "A suspect member's heartbeats resumed."),
    _code(
        "BMQ-7005",
        "cluster member failed: ",
        "A suspect member did not update the store for cluster.monitor.threshold intervals, by "
        "the database's clock: it is taken over.",
        "Find out why the member stopped; restarted, it joins again owning nothing.",
    ),
    _code(
        "BMQ-7006",
        "cluster members not read: ",
        "The members could not be read from the shared store: no member is judged meanwhile.",
        "Check the PostgreSQL server.",
    ),
    _code(
        "BMQ-7007",
        "cluster member check failed",
        "A defect stopped one round of the member checks; the next round runs.",
        "Report it with the traceback.",
    ),
    _code(
        "BMQ-7008",
        "takeover started",
        "The broker claims a failed member in the store (mq.broker.takeover.start).",
    ),
    _code(
        "BMQ-7009",
        "takeover complete: ",
        "The broker took a failed member's persistent state over and serves it "
        "(mq.broker.takeover.complete).",
    ),
    _code(
        "BMQ-7010",
        "takeover failed: ",
        "A takeover did not happen: another member claimed it first, it updated the store "
        "again, or the store failed (mq.broker.takeover.fail).",
        "None if another member took it over; otherwise it is tried again once the member is "
        "judged failed again.",
    ),
    _code(
        "BMQ-7011",
        "no failover: ",
        "shutdown bkr -nofailover: the broker's record in the shared store says that no member "
        "is to take it over; the broker then shuts down.",
        "Start it again to serve its messages, or take it over with takeover bkr -f.",
    ),
    _code(
        "BMQ-7012",
        "stream merged on takeover: ",
        "A failed member had a stream of the same name as this broker's: its records now follow "
        "this broker's own, each at the new offset given (the old range, then the new one); "
        "consumers that track offsets of the failed member's stream find them there.",
    ),
    _code(
        "BMQ-7020",
        "catalogue changed in the shared store",
        "Users, virtual hosts or permissions were changed on another member of the HA cluster; "
        "they are now in force on this one (a deleted user's connections and a deleted virtual "
        "host's are closed).",
    ),
    _code(
        "BMQ-7021",
        "catalogue not read from the shared store: ",
        "A change of users, virtual hosts or permissions on another member could not be read: "
        "the store is out of reach. It is read again once the store answers.",
        "Check PostgreSQL (see the store's own log lines).",
    ),
    _code(
        "BMQ-7022",
        "catalogue change not applied: ",
        "A virtual host deleted on another member could not be deleted here: its queues could "
        "not be written away. It is tried again at the next reading of the catalogue.",
        "Check PostgreSQL.",
    ),
    # Streams.
    _code(
        "BMQ-8001",
        "stream append failed: ",
        "Writing to a stream's segment (a file, or the PostgreSQL store's tables) failed: its "
        "publishers are nacked.",
        "Check the disk of the data directory, or the PostgreSQL store named.",
    ),
    _code(
        "BMQ-8002",
        "could not cut a failed append off a stream segment",
        "After a failed append the segment could not be truncated; it is cut at the next start.",
        "Check the disk of the data directory.",
    ),
    _code(
        "BMQ-8003",
        "stream segment ends in a torn chunk",
        "A stream segment ended in a partly written chunk (a crash); it was dropped: it was never "
        "confirmed.",
    ),
    _code(
        "BMQ-8004",
        "stream log could not be removed: ",
        "A deleted stream's segments (files, or rows of the PostgreSQL store) could not be "
        "removed.",
        "Remove the directory named by hand; rows of a stream whose queue is gone are removed at "
        "the broker's next start.",
    ),
    _code(
        "BMQ-8005",
        "stream cannot be opened: ",
        "A stream's segments could not be read at start; the stream is not served.",
        "Check the files or the store named; restore them from a backup.",
    ),
    _code(
        "BMQ-8006",
        "stream read failed: ",
        "Reading a stream for a consumer failed; its consumer is cancelled.",
        "Check the disk of the data directory, or the PostgreSQL store named.",
    ),
    _code(
        "BMQ-8007",
        "removed the directories of deleted streams",
        "At start: streams deleted in the store had left their directories (the broker stopped "
        "after the deletion was committed, before or while they were removed); they went.",
    ),
)

# Longest first: a line takes the most specific code whose start it has.
_BY_START: Final = sorted(CATALOGUE, key=lambda entry: len(entry.starts), reverse=True)


def code_of(message: str) -> str | None:
    """The code of a log line with this message, if the catalogue has one."""
    for entry in _BY_START:
        if message.startswith(entry.starts):
            return entry.code
    return None


def markdown() -> str:
    """The catalogue as the table of docs/log-codes.md."""
    lines = [
        "# Log codes",
        "",
        "Every operational line of the broker's log carries one of these codes in its `logcode`",
        "field. Generated by `python -m batonmq.logcodes` from `src/batonmq/logcodes.py`.",
        "",
        "| code | the line starts with | meaning | what to do |",
        "|---|---|---|---|",
    ]
    for entry in CATALOGUE:
        starts = entry.starts.strip().replace("|", "\\|")
        lines.append(f"| {entry.code} | `{starts}` | {entry.meaning} | {entry.action} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
