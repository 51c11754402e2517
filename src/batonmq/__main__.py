"""``python -m batonmq`` is the ``batonmq`` command."""

from batonmq.cli.broker import main

raise SystemExit(main())
