"""PostgreSQL connection strings: what asyncpg is given, and what an operator may read (never the
password)."""

from __future__ import annotations

import re
import urllib.parse
from typing import Final

from batonmq.store.base import StoreError

#: One pair of a libpq keyword/value connection string: a value is quoted ('a b', with \' and
#: \\ escapes) or ends at white space.
_KEYWORD_VALUE: Final = r"(\w+)\s*=\s*('(?:[^'\\]|\\.)*'|[^\s']*)"


def parse_dsn(dsn: str) -> tuple[str, str, list[str]]:
    """(a DSN asyncpg accepts, the DSN without its password, the password's spellings).

    asyncpg takes URIs only; a libpq keyword/value string ("host=db dbname=mq") becomes a URI
    whose query holds the keywords, which asyncpg reads the same way."""
    if "://" not in dsn:
        if not re.fullmatch(rf"\s*(?:{_KEYWORD_VALUE}\s*)*", dsn):
            # Not echoed: it may hold a password.
            raise StoreError("invalid PostgreSQL DSN: neither a URI nor keyword=value pairs")
        values = [
            (key, re.sub(r"\\(.)", r"\1", value[1:-1]) if value.startswith("'") else value)
            for key, value in re.findall(_KEYWORD_VALUE, dsn)
        ]
        secrets = [value for key, value in values if key == "password" and value]
        safe = " ".join(f"{key}={value}" for key, value in values if key != "password")
        return "postgresql://?" + urllib.parse.urlencode(values), safe, secrets
    parts = urllib.parse.urlsplit(dsn)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    user, colon, password = userinfo.partition(":")
    secrets = [password, urllib.parse.unquote(password)] if colon and password else []
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    secrets += [value for key, value in query if key == "password" and value]
    safe_query = urllib.parse.urlencode([(key, value) for key, value in query if key != "password"])
    safe_netloc = f"{user}@{hosts}" if at and user else hosts
    safe = urllib.parse.urlunsplit(parts._replace(netloc=safe_netloc, query=safe_query))
    return dsn, safe, secrets
