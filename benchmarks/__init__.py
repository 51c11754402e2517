"""Benchmarks: BatonMQ side by side with RabbitMQ (`python -m benchmarks.compare`), and the
single-purpose scripts `backlog_rss.py` and `topic_routing.py`. Not tests: nothing here runs in CI
except the unit tests of the pure parts (tests/unit/benchmarks)."""
