"""BatonMQ architecture: `spark/` is "optional extra `batonmq[spark]`" and must not "be imported
by the broker": a broker, batonctl and the engine API load neither it nor PySpark."""

from __future__ import annotations

import subprocess
import sys


def test_the_broker_batonctl_and_the_engine_api_load_no_spark():
    probe = (
        "import sys\n"
        "import batonmq.server.app, batonmq.cli.broker, batonmq.cli.ctl, batonmq.engine.api\n"
        "spark = ('pyspark', 'pyarrow', 'batonmq.spark')\n"
        "print(sorted(name for name in sys.modules if name.startswith(spark)))\n"
    )
    finished = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )

    assert finished.stdout.strip() == "[]", finished.stderr
