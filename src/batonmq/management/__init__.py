"""Administration of a running broker over HTTP: RabbitMQ's management API (its endpoints and
field names), the web console and the metrics, all on the engine's public API."""
