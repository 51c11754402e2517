"""What asyncpg raises when PostgreSQL cannot be used: the server's own errors, a refused or lost
connection, and a session that a cancelled or timed-out statement left mid-operation (asyncpg's
InternalClientError, seen at close while a commit waited for a synchronous standby that had
gone). The PostgreSQL store and the offline HA-store commands turn each into a StoreError."""

from __future__ import annotations

from typing import Final

import asyncpg

DATABASE_ERRORS: Final = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    OSError,
    TimeoutError,
)
