"""asyncpg is imported only when the PostgreSQL store is chosen (the foundation requirements:
"asyncpg stays the driver but is imported only when the PostgreSQL store is chosen"): a broker
on SQLite, batonctl and the engine API load without it."""

from __future__ import annotations

import subprocess
import sys


def test_the_broker_batonctl_and_the_engine_api_load_without_asyncpg():
    probe = (
        "import sys\n"
        "import batonmq.server.app, batonmq.cli.ctl, batonmq.engine.api\n"
        "from batonmq.config import Config\n"
        "from batonmq.store.configured import configured_store\n"
        "configured_store(Config())\n"
        "print('asyncpg' in sys.modules)\n"
    )
    finished = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert finished.stdout.strip() == "False", finished.stderr
