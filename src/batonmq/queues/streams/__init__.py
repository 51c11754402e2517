"""Stream queues' storage: an append-only log of chunks in segment files, read by offset.

RabbitMQ streams over AMQP 0-9-1 are the model: every message gets an offset that only grows and
the time its chunk was written; a chunk is what one append wrote together (RabbitMQ's chunk, the
unit that "last" attaches to and that a Bloom filter describes); retention removes whole segments.
"""
