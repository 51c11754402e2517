"""Listeners, the asyncio glue of connections, signals and graceful shutdown."""
