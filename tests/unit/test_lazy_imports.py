"""What the broker imports only when it needs it, each probed in a fresh interpreter: asyncpg
only when the PostgreSQL store is chosen (the foundation requirements: "asyncpg stays the driver
but is imported only when the PostgreSQL store is chosen"), aiohttp only for the HTTP listener,
and never the Spark extra (BatonMQ architecture: `spark/` is an optional extra, not imported by
the broker)."""

from __future__ import annotations

import subprocess
import sys


def probed(probe: str) -> str:
    """What the Python code `probe` prints, run in a fresh interpreter."""
    finished = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    return finished.stdout.strip()


def test_the_broker_batonctl_and_the_engine_api_load_without_asyncpg():
    probe = (
        "import sys\n"
        "import batonmq.server.app, batonmq.cli.ctl, batonmq.engine.api\n"
        "from batonmq.config import Config\n"
        "from batonmq.store.configured import configured_store\n"
        "configured_store(Config())\n"
        "print('asyncpg' in sys.modules)\n"
    )
    assert probed(probe) == "False"


def test_a_broker_without_the_http_api_runs_without_aiohttp():
    """aiohttp is imported only by the management HTTP listener: a broker started with
    `[listeners.http] enabled = false` (and batonctl, and the engine API) never loads it."""
    probe = (
        "import asyncio, sys, tempfile\n"
        "import batonmq.cli.broker, batonmq.cli.ctl, batonmq.engine.api\n"
        "from batonmq.config import load_config\n"
        "from batonmq.server.app import BrokerServer\n"
        "async def main(data_dir):\n"
        "    config = load_config(overrides={'listeners.amqp.bind': '127.0.0.1',\n"
        "        'listeners.amqp.port': 0, 'listeners.http.enabled': False,\n"
        "        'broker.data_dir': data_dir}, environ={})\n"
        "    server = BrokerServer(config)\n"
        "    await server.start()\n"
        "    await server.shutdown()\n"
        "with tempfile.TemporaryDirectory() as data_dir:\n"
        "    asyncio.run(main(data_dir))\n"
        "print('aiohttp' in sys.modules)\n"
    )
    assert probed(probe) == "False"


def test_the_broker_batonctl_and_the_engine_api_load_no_spark():
    probe = (
        "import sys\n"
        "import batonmq.server.app, batonmq.cli.broker, batonmq.cli.ctl, batonmq.engine.api\n"
        "spark = ('pyspark', 'pyarrow', 'batonmq.spark')\n"
        "print(sorted(name for name in sys.modules if name.startswith(spark)))\n"
    )
    assert probed(probe) == "[]"
