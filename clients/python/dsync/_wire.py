"""One statement and its first row, straight through libpq: the calls
every acquire and release makes, for the thread and the asyncio clients.

psycopg's execute() builds a cursor, a transformer and a dumper per
parameter, and calls into libpq about a dozen times per statement; with
its Python implementation (Debian's) that was 45 us of CPU in a 95 us
acquire-and-release cycle, and under threads each call into libpq lets go
of the GIL and costs a switch to take it back (test/bench/wait_bench.py).
Every statement of the library casts its parameters (_sql.py), so they
are sent here as untyped text that the server converts, and the few
types the library's calls return are read directly.

On a connection that reaches the server itself (the backend pid the
server reports is the one libpq was given at connect), each statement is
prepared once and then executed by name, which spares the server parsing
and planning it.  Through a pooler the backend behind a connection changes
between transactions, so statements are sent whole; a prepared statement
the server does not know after all (a pool's DISCARD ALL) makes that
connection send them whole from then on.  Names are derived from the
statement's text, so one prepared under the same name is the same.

The statement runs under psycopg's own connection lock and waiting loop,
which cancel it on Ctrl-C as execute() would.  first_row() returns None
where it cannot run a statement (a parameter of another type than str,
int, bool, timedelta, Jsonb or None, text with a NUL or that the
connection's encoding cannot hold; a connection not in autocommit), for
the caller to use execute(), which raises or sends as it always did.
"""

from __future__ import annotations

import hashlib
import json
import weakref
from datetime import timedelta
from typing import Any, Dict, List, Optional, Sequence, Tuple

import psycopg
from psycopg import pq
from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb

try:                                    # psycopg's non-blocking send-and-fetch
    from psycopg.errors import error_from_result as _error
    from psycopg.generators import execute as _execute
except ImportError:                     # pragma: no cover - another psycopg layout
    _execute = None
    _error = None

_OK = (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK)
_BOOL, _INT2, _INT4, _INT8, _TEXT = 16, 21, 23, 20, 25
_MICROSECOND = timedelta(microseconds=1)
_SQLSTATE = pq.DiagnosticField.SQLSTATE
_NO_SUCH_STATEMENT, _ALREADY_PREPARED = b"26000", b"42P05"
# A prepared statement whose result type changed under it (an extension
# update): raised before it runs, as an unknown statement is.
_REPLANNED = (b"0A000", "cached plan must not change result type")
_PID = "SELECT pg_backend_pid()"

# statement -> its text with $n placeholders, and the name it is prepared as
_queries: Dict[str, Tuple[bytes, bytes]] = {}
# connection -> the names prepared on it, or None: never prepare there
_prepared: "weakref.WeakKeyDictionary[Any, Optional[set]]" = weakref.WeakKeyDictionary()


def _numbered(statement: str) -> Tuple[bytes, bytes]:
    """statement with its %s placeholders as $1, $2, ... (the library's
    statements have no other % in them), and the name to prepare it as."""
    known = _queries.get(statement)
    if known is None:
        parts = statement.split("%s")
        query = parts[0] + "".join(f"${i}{part}" for i, part in enumerate(parts[1:], 1))
        raw = query.encode()
        known = _queries[statement] = (raw, b"dsync_" + hashlib.blake2b(
            raw, digest_size=12).hexdigest().encode())
    return known


def _text(value: Any, encoding: str) -> Optional[bytes]:
    """value as the text the server reads for the type the statement
    casts it to; a ValueError for a type this does not handle."""
    if value is None:
        return None
    if isinstance(value, str):
        if "\x00" in value:
            # libpq would cut the text there: execute() refuses it (DataError).
            raise ValueError("NUL")
        return value.encode(encoding)       # UnicodeEncodeError is a ValueError
    if isinstance(value, bool):
        return b"t" if value else b"f"
    if isinstance(value, int):
        return b"%d" % value
    if isinstance(value, timedelta):
        return b"%d microseconds" % (value // _MICROSECOND)    # exactly what it holds
    if isinstance(value, Jsonb):
        return _text((value.dumps or json.dumps)(value.obj), encoding)
    raise ValueError(type(value).__name__)


def _values(conn: Any, params: Sequence[Any]) -> Optional[List[Optional[bytes]]]:
    """params as text, or None if conn or a parameter is not for this."""
    if _execute is None or not conn.autocommit:
        return None
    encoding = conn.info.encoding
    try:
        return [_text(v, encoding) for v in params]
    except ValueError:
        return None


def behind_pooler(conn: psycopg.Connection) -> bool:
    """Whether conn goes through a connection pooler (PgBouncer sends a
    backend key of its own, so the server's pid differs from libpq's)."""
    return conn.cursor(row_factory=tuple_row).execute(_PID).fetchone()[0] != \
        conn.info.backend_pid


async def behind_pooler_async(conn: psycopg.AsyncConnection) -> bool:
    """behind_pooler() on an asyncio connection."""
    cur = await conn.cursor(row_factory=tuple_row).execute(_PID)
    return (await cur.fetchone())[0] != conn.info.backend_pid


def _first_step(conn: Any, name: bytes) -> str:
    """What to send first for the statement prepared as name on conn:
    "prepare", "execute" (prepared before) or "whole"."""
    done = _prepared[conn]
    if done is None:
        return "whole"
    return "execute" if name in done else "prepare"


def _after(conn: Any, step: str, name: bytes,
           res: pq.abc.PGresult) -> Tuple[str, Optional[pq.abc.PGresult]]:
    """After step's result res: the next step, and the statement's result
    once there is one."""
    if res.status in _OK:
        if step == "prepare":
            _prepared[conn].add(name)
            return "execute", None
        return "done", res
    state = res.error_field(_SQLSTATE) or b""       # libpq's own errors have none
    if step == "prepare" and state == _ALREADY_PREPARED:
        _prepared[conn].add(name)       # the same text under the same name
        return "execute", None
    # Raised when a statement is bound, before it runs: sending it whole
    # cannot run it twice.
    if step == "execute" and (state == _NO_SUCH_STATEMENT or (
            state == _REPLANNED[0] and _REPLANNED[1] in (res.error_message or b"").decode(
                "utf-8", "replace"))):
        _prepared[conn] = None          # not the server we prepared on: stop
        return "whole", None
    return "done", res                  # the statement's own error


def _row(conn: Any, res: pq.abc.PGresult) -> List[tuple]:
    """[res's first row] (empty if none); errors raised as execute() does."""
    if res.status not in _OK:
        raise _error(res, encoding=conn.info.encoding)
    if res.ntuples == 0:
        return []
    encoding = conn.info.encoding
    row: List[Any] = []
    for col in range(res.nfields):
        data = res.get_value(0, col)
        oid = res.ftype(col)
        if data is None:
            row.append(None)
        elif oid == _BOOL:
            row.append(data == b"t")
        elif oid in (_INT8, _INT4, _INT2):
            row.append(int(data))
        elif oid == _TEXT and encoding != "ascii":
            row.append(bytes(data).decode(encoding))
        else:                           # SQL_ASCII text is bytes, as execute() gives it
            from psycopg.adapt import Transformer
            tx = Transformer(conn)
            tx.set_pgresult(res)
            return [tx.load_row(0, tuple)]
    return [tuple(row)]


def _sent(pgconn: Any, step: str, query: bytes, name: bytes,
          values: List[Optional[bytes]]) -> Any:
    """Send step's message for the statement and wait for its results: a
    generator for conn.wait(), so that a Ctrl-C from the send on cancels
    the statement in the server."""
    if step == "prepare":
        pgconn.send_prepare(name, query)
    elif step == "execute":
        pgconn.send_query_prepared(name, values)
    else:
        pgconn.send_query_params(query, values)
    return (yield from _execute(pgconn))


def first_row(conn: psycopg.Connection, statement: str,
              params: Sequence[Any]) -> Optional[List[tuple]]:
    """[the statement's first row] (an empty list if it has none), or None
    if this cannot run it and execute() must."""
    values = _values(conn, params)
    if values is None:
        return None
    if conn not in _prepared:
        _prepared[conn] = None if behind_pooler(conn) else set()
    query, name = _numbered(statement)
    step = _first_step(conn, name)
    while True:
        with conn.lock:
            res = conn.wait(_sent(conn.pgconn, step, query, name, values))[-1]
        step, final = _after(conn, step, name, res)
        if final is not None:
            return _row(conn, final)


async def first_row_async(conn: psycopg.AsyncConnection, statement: str,
                          params: Sequence[Any]) -> Optional[List[tuple]]:
    """first_row() on an asyncio connection."""
    values = _values(conn, params)
    if values is None:
        return None
    if conn not in _prepared:
        _prepared[conn] = None if await behind_pooler_async(conn) else set()
    query, name = _numbered(statement)
    step = _first_step(conn, name)
    while True:
        async with conn.lock:
            res = (await conn.wait(_sent(conn.pgconn, step, query, name, values)))[-1]
        step, final = _after(conn, step, name, res)
        if final is not None:
            return _row(conn, final)
