"""The load generator: a minimal AMQP 0-9-1 client whose hot path writes pre-encoded publish frames
and scans deliveries without decoding them, so that the broker, not the client, is what is
measured. pamqp encodes and decodes everything off the hot path (the handshake, declares)."""
