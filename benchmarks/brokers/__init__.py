"""The brokers the harness measures, each started on free loopback ports in a temporary
directory of its own and stopped after: RabbitMQ, BatonMQ (SQLite or PostgreSQL store), and the
load generator's sink."""
