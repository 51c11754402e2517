"""Queue types behind the `QueueType` protocol (ARCHITECTURE.md, queues/)."""
