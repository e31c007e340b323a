"""dsync from SQLAlchemy (1.4 and 2.x; psycopg2, or psycopg 3 with 2.x):
guard a Session's or a Connection's transaction with a lock held through
this library, write rows fenced by their lease's token, and see dsync's
errors as dsync's exceptions.

    from dsync.sqlalchemy import guard, fenced_update, translate_errors

    translate_errors(engine)             # StaleToken / NotHeld instead of a bare 55000
    with lock, Session(engine) as session, session.begin():
        token = guard(lock, session)     # nobody can take the lease until this commits
        fenced_update(session, Account, token, Account.id == 1, balance=Account.balance - 5)

The lock is held and renewed by a dsync Client (psycopg 3, its own
connections); the writes go through your engine, on your driver.
`lock.guard(session)` is the same as guard(lock, session).  From async
SQLAlchemy (asyncpg), with an AsyncLock, `token = await lock.guard(session)`
takes an AsyncSession or AsyncConnection (the same as
`await session.run_sync(lambda s: guard(lock, s))`), and the other
functions run through run_sync.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional

from contextlib import contextmanager

import sqlalchemy
from sqlalchemy import event, exc as sa_exc, text

from . import errors
from ._views import guarded_names

__all__ = ["guard", "fenced_update", "translate_errors", "translated"]

# Named parameters and CAST: text() reads `::` after a bind parameter
# badly, and a bound parameter keeps names out of the SQL text.
_ASSERT_HELD = text("SELECT dsync_assert_held(CAST(:lease AS text), CAST(:holder AS text))")


def guard(lock: Any, conn: Any) -> int:
    """In the transaction of conn (a SQLAlchemy Session or Connection): the
    fencing token, as an int, if the calling thread holds lock; else
    NotHeld (at once if it holds nothing; SQLSTATE 55000 from the server,
    the transaction aborted, if its hold was lost: roll it back).  From this call until that transaction ends nobody else can
    take the lease, so the writes made in it are protected."""
    lease, holder = guarded_names(lock)
    what = f'guarding lease "{lease}"'
    try:
        token = conn.execute(_ASSERT_HELD, {"lease": lease, "holder": holder}).scalar()
    except sa_exc.DBAPIError as exc:
        errors.raise_translated(exc, what)
        raise
    return int(token)


def fenced_update(conn: Any, table: Any, token: int, *where: Any,
                  token_column: str = "token", **values: Any) -> int:
    """UPDATE table SET values..., token_column = token WHERE where..., in
    conn's transaction (a Session or Connection); the number of rows
    updated.  table is a Table or a mapped class whose table has a
    dsync_fenced(token_column) trigger (docs/reference/fencing.md): a
    token older than one the table has accepted is refused by the
    database, and raised here as StaleToken."""
    target = getattr(table, "__table__", table)
    stmt = sqlalchemy.update(target).values(**values, **{token_column: token})
    for clause in where:
        stmt = stmt.where(clause)
    try:
        result = conn.execute(stmt)
    except sa_exc.DBAPIError as exc:
        errors.raise_translated(exc, f"writing {target.name} with fencing token {token}")
        raise
    return result.rowcount


@contextmanager
def translated(what: Optional[str] = None) -> Iterator[None]:
    """Within the block, a SQLAlchemy error that is one of dsync's
    (StaleToken, NotHeld, ExtensionNotCreated, NotPreloaded, ...) is raised
    as dsync's exception, with SQLAlchemy's as its __cause__; any other
    passes unchanged."""
    try:
        yield
    except sa_exc.DBAPIError as exc:
        errors.raise_translated(exc, what or "")
        raise


def _handle_error(context: Any) -> Optional[BaseException]:
    """handle_error listener: dsync's exception in place of SQLAlchemy's
    for dsync's errors (SQLAlchemy raises what a listener returns)."""
    err = errors.translate(context.original_exception)
    if err is None:
        return None
    if context.sqlalchemy_exception is not None:
        err.__cause__ = context.sqlalchemy_exception
    return err


def translate_errors(engine: Any) -> Any:
    """From now on every statement of engine (and of the Sessions bound to
    it) that fails with one of dsync's errors raises dsync's exception
    (StaleToken, NotHeld, ...) instead of an OperationalError whose .orig
    is ObjectNotInPrerequisiteState.  Returns engine.  Idempotent.  An
    AsyncEngine is taken too (the listener goes on its sync_engine)."""
    target = getattr(engine, "sync_engine", engine)
    if not event.contains(target, "handle_error", _handle_error):
        event.listen(target, "handle_error", _handle_error)
    return engine
