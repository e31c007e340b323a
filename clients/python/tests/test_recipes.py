"""The recipes of clients/RECIPES.md, run: dsync from SQLAlchemy (1.4,
Debian's, on psycopg2) and asyncpg without this package, directly and
through PgBouncer."""

import asyncio
import json
from datetime import timedelta

import asyncpg
import sqlalchemy
from sqlalchemy import text
from sqlalchemy.orm import Session


def _sqlalchemy_url(dsn):
    parts = dict(p.split("=", 1) for p in dsn.split())
    return (f"postgresql+psycopg2://{parts['user']}@/{parts['dbname']}"
            f"?host={parts['host']}&port={parts['port']}")


def test_sqlalchemy_recipe(dsn, name):
    engine = sqlalchemy.create_engine(_sqlalchemy_url(dsn))
    # The trap the recipe warns about: in a Session, an acquire that is not
    # committed is rolled back when the session closes.
    with Session(engine) as session:
        token = session.execute(text("SELECT dsync_acquire(:n, 'web-1', CAST(:ttl AS interval))"),
                                {"n": name, "ttl": "30 seconds"}).scalar()
        assert token is not None
    with engine.connect() as conn:
        assert conn.execute(text("SELECT dsync_leader(:n)"), {"n": name}).scalar() is None

    # The recipe: acquire and release on an autocommit connection, guard
    # inside the Session's transaction.
    auto = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    token = auto.execute(
        text("SELECT dsync_acquire(:n, :h, CAST(:ttl AS interval), CAST(:wait AS interval),"
             " CAST(:info AS jsonb))"),
        {"n": name, "h": "web-1", "ttl": "30 seconds", "wait": "5 seconds",
         "info": json.dumps({"pid": 1})}).scalar()
    assert isinstance(token, int)
    with Session(engine) as session, session.begin():
        guarded = session.execute(text("SELECT dsync_assert_held(:n, :h)"),
                                  {"n": name, "h": "web-1"}).scalar()
        assert guarded == token
    assert auto.execute(text("SELECT dsync_release(:n, :h)"), {"n": name, "h": "web-1"}).scalar()
    auto.close()
    engine.dispose()


def test_asyncpg_recipe(dsn, name):
    parts = dict(p.split("=", 1) for p in dsn.split())

    async def main():
        # statement_cache_size=0: PgBouncer in transaction mode.
        conn = await asyncpg.connect(host=parts["host"], port=int(parts["port"]),
                                     user=parts["user"], database=parts["dbname"],
                                     statement_cache_size=0)
        try:
            token = await conn.fetchval(
                "SELECT dsync_acquire($1, $2, $3::interval, $4::interval, $5::jsonb)",
                name, "worker-1", timedelta(seconds=30), timedelta(seconds=5),
                json.dumps({"host": "h"}))
            assert isinstance(token, int)
            async with conn.transaction():
                assert await conn.fetchval("SELECT dsync_assert_held($1, $2)",
                                           name, "worker-1") == token
            assert await conn.fetchval("SELECT dsync_release($1, $2)", name, "worker-1")
        finally:
            await conn.close()

    asyncio.run(main())
