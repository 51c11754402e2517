"""The broker runtime: virtual hosts, sessions and channels, one handler per AMQP method."""
