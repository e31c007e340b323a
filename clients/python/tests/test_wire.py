"""dsync._wire: the hot calls sent straight through libpq must read and
fail exactly as psycopg's execute() does, prepare only where the server
behind the connection stays the same, and recover when the server
forgets a prepared statement."""

import asyncio
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from psycopg.types.json import Jsonb

from dsync import Client, _wire, errors

TYPES = ("SELECT %s::text, %s::int, %s::bigint, %s::boolean, %s::interval, %s::jsonb,"
         " %s::text IS NULL, now() - now()")
VALUES = ("é ✓ \"quoted\"", 7, 2 ** 40, True, timedelta(days=1, seconds=5, microseconds=3),
          '{"a": [1, 2]}', None)


@pytest.fixture(params=["direct", "pgbouncer"])
def conn(request, server):
    with psycopg.connect(server.dsn(bouncer=request.param == "pgbouncer"),
                         autocommit=True) as c:
        yield c


def prepared_names(conn):
    return {r[0] for r in conn.execute("SELECT name FROM pg_prepared_statements")}


def test_rows_read_as_execute_reads_them(conn):
    expected = conn.execute(TYPES, VALUES).fetchone()
    for _ in range(3):                  # sent whole or prepared, then executed by name
        assert _wire.first_row(conn, TYPES, VALUES) == [expected]
    assert _wire.first_row(conn, "SELECT 1 WHERE %s::boolean", (False,)) == []
    assert _wire.first_row(conn, "SELECT %s::int IS NULL, NULL::int", (None,)) == [(True, None)]


def test_errors_are_raised_as_execute_raises_them(conn):
    for statement, params, error in (
            ("SELECT 1 / %s::int", (0,), psycopg.errors.DivisionByZero),
            ("SELECT no_such_function(%s::int)", (1,), psycopg.errors.UndefinedFunction),
            ("SELECT dsync_acquire(%s::text, %s::text, %s::interval)", ("", "h", timedelta(1)),
             None)):
        with pytest.raises(psycopg.Error) as by_execute:
            conn.execute(statement, params)
        for _ in range(2):
            with pytest.raises(psycopg.Error) as by_wire:
                _wire.first_row(conn, statement, params)
            assert type(by_wire.value) is type(by_execute.value)
            assert by_wire.value.sqlstate == by_execute.value.sqlstate
            assert str(by_wire.value) == str(by_execute.value)
            if error is not None:
                assert isinstance(by_wire.value, error)
        assert conn.execute("SELECT 1").fetchone() == (1,)     # the connection is sound


def test_what_it_cannot_send_is_left_to_execute(server):
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        assert _wire.first_row(conn, "SELECT %s::timestamptz",
                               (datetime.now(timezone.utc),)) is None
        assert _wire.first_row(conn, "SELECT %s::float8", (1.5,)) is None
    with psycopg.connect(server.dsn()) as conn:     # not autocommit: execute() begins
        assert _wire.first_row(conn, "SELECT %s::int", (1,)) is None


def test_prepared_once_on_a_direct_connection_only(server):
    statement = "SELECT %s::int + 1"
    _, name = _wire._numbered(statement)
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        for i in range(3):
            assert _wire.first_row(conn, statement, (i,)) == [(i + 1,)]
        assert name.decode() in prepared_names(conn)
        assert _wire._prepared[conn] == {name}
    # Through PgBouncer in transaction mode two clients' statements share
    # server connections: a name prepared on one would be missing on another.
    bounced = [psycopg.connect(server.dsn(bouncer=True), autocommit=True) for _ in range(2)]
    try:
        for i in range(20):
            for c in bounced:
                assert _wire.first_row(c, statement, (i,)) == [(i + 1,)]
        assert all(_wire._prepared[c] is None for c in bounced)
    finally:
        for c in bounced:
            c.close()


def test_a_statement_the_server_forgot_is_sent_whole(server):
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        assert _wire.first_row(conn, "SELECT %s::int * 2", (2,)) == [(4,)]
        conn.execute("DEALLOCATE ALL")      # what a pool's reset does
        assert _wire.first_row(conn, "SELECT %s::int * 2", (3,)) == [(6,)]
        assert _wire._prepared[conn] is None
        assert _wire.first_row(conn, "SELECT %s::int * 2", (4,)) == [(8,)]
        assert prepared_names(conn) == set()


def test_a_name_prepared_already_is_used(server):
    statement = "SELECT %s::int - 1"
    query, name = _wire._numbered(statement)
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(f"PREPARE {name.decode()} AS {query.decode()}")
        assert _wire.first_row(conn, statement, (5,)) == [(4,)]
        assert _wire._prepared[conn] == {name}


def test_the_asyncio_client_reads_fails_and_recovers_alike(server):
    async def main():
        async with await psycopg.AsyncConnection.connect(server.dsn(), autocommit=True) as conn:
            cur = await conn.execute(TYPES, VALUES)
            expected = await cur.fetchone()
            for _ in range(3):
                assert await _wire.first_row_async(conn, TYPES, VALUES) == [expected]
            with pytest.raises(psycopg.errors.DivisionByZero):
                await _wire.first_row_async(conn, "SELECT 1 / %s::int", (0,))
            await conn.execute("DEALLOCATE ALL")
            assert await _wire.first_row_async(conn, TYPES, VALUES) == [expected]
            assert _wire._prepared[conn] is None
    asyncio.run(main())


def test_text_it_cannot_send_goes_through_execute(server, admin, name):
    """libpq would cut a string at a NUL (two holders would become one):
    such text, and text the connection's encoding cannot hold, is left to
    execute(), which refuses it as it always did."""
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        assert _wire.first_row(conn, "SELECT %s::text", ("a\x00b",)) is None
        assert _wire.first_row(conn, "SELECT %s::jsonb", (Jsonb({"k": "é"}),)) == \
            [conn.execute("SELECT %s::jsonb", (Jsonb({"k": "é"}),)).fetchone()]
    with Client(server.dsn()) as client:
        for holder in ("h\x00one", "h\x00two"):
            with pytest.raises(errors.DsyncError):
                client.lock(name, holder=holder).acquire(blocking=False)
    assert admin.execute("SELECT count(*) FROM dsync_leases WHERE lease = %s",
                         (name,)).fetchone() == (0,)


def test_an_sql_ascii_database_reads_as_execute_reads(server, admin):
    if admin.execute("SELECT 1 FROM pg_database WHERE datname = 'wire_ascii'").fetchone() is None:
        admin.execute("CREATE DATABASE wire_ascii ENCODING 'SQL_ASCII' TEMPLATE template0"
                      " LC_COLLATE 'C' LC_CTYPE 'C'")
    with psycopg.connect(server.dsn(db="wire_ascii", user="postgres"), autocommit=True) as conn:
        # Text there is bytes, as execute() gives it (no decoding fails).
        assert _wire.first_row(conn, "SELECT %s::text || 'caf' || chr(233)", ("x",)) == \
            [conn.execute("SELECT %s::text || 'caf' || chr(233)", ("x",)).fetchone()]
        assert _wire.first_row(conn, "SELECT %s::text", ("é",)) is None    # not ascii


def test_a_statement_whose_result_type_changed_is_sent_whole(admin):
    """An extension update may change a function's result type under a
    prepared statement: PostgreSQL refuses it before running it."""
    admin.execute("DROP FUNCTION IF EXISTS wire_f(int)")
    admin.execute("CREATE FUNCTION wire_f(int) RETURNS int LANGUAGE sql AS 'SELECT $1'")
    try:
        statement = "SELECT * FROM wire_f(%s::int)"
        assert _wire.first_row(admin, statement, (1,)) == [(1,)]
        assert _wire.first_row(admin, statement, (2,)) == [(2,)]    # by name
        admin.execute("DROP FUNCTION wire_f(int)")
        admin.execute("CREATE FUNCTION wire_f(int) RETURNS text LANGUAGE sql"
                      " AS 'SELECT $1::text'")
        assert _wire.first_row(admin, statement, (3,)) == [("3",)]
        assert _wire._prepared[admin] is None
    finally:
        admin.execute("DROP FUNCTION IF EXISTS wire_f(int)")
