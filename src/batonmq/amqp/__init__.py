"""The AMQP 0-9-1 protocol without IO: bytes in, events out; calls in, bytes out (BatonMQ style
§1)."""
