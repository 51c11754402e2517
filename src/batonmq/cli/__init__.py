"""The command-line programs: `batonmq` (run a broker)."""
