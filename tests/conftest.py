"""Options shared by every test layer."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--amqp-url",
        default=None,
        help=(
            "run the integration tests against this already-running broker (for example a "
            "RabbitMQ, to check that a test encodes RabbitMQ's behaviour) instead of starting "
            "BatonMQ"
        ),
    )
