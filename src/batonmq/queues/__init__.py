"""Queue types behind the `QueueType` protocol (BatonMQ architecture, queues/)."""
