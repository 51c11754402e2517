"""HA clusters: brokers sharing one PostgreSQL store, watching each other, and taking over a failed
broker's messages (the MQ 4.1 HA guide). Decisions are pure functions and small state machines that
return effects; a thin runtime carries them out."""
