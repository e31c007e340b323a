"""dsync from Django (3.2 on psycopg2; 4.2 and later on psycopg2 or psycopg 3):
guard a transaction.atomic() block with a lock held through this library,
see dsync's errors as dsync's exceptions, and run management commands and
scheduled jobs on one node only.

    from dsync.django import guard, translated, leader_only, LeaderOnlyCommand

    with lock, transaction.atomic():
        token = guard(lock)                          # on connections["default"]
        with translated():                           # StaleToken instead of a bare 55000
            Account.objects.filter(id=1).update(balance=F("balance") - 5, token=token)

    @leader_only("nightly-report", ttl=60)          # every node schedules it, one runs it
    def nightly_report(): ...

    class Command(LeaderOnlyCommand):                # ./manage.py prune: one node at a time
        lease_ttl = 300
        def handle(self, *args, **options): ...

Locks are held and renewed by a dsync Client (psycopg 3, connections of its
own, made from the same DATABASES entry); the guard and the writes run on
Django's connection, in Django's transaction.
"""

from __future__ import annotations

import functools
import logging
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, Optional

import psycopg
from django.core.management.base import BaseCommand, OutputWrapper
from django.db import DatabaseError, connections
from django.db.transaction import TransactionManagementError

from . import errors
from ._views import guarded_names
from .client import Client, default_client

__all__ = ["guard", "translated", "conninfo", "leader_only", "LeaderOnlyCommand"]

log = logging.getLogger("dsync")

# Cast in the statement: psycopg 3 (Django 4.2+) may bind server-side, and
# an untyped parameter would leave the server to guess the function.
_ASSERT_HELD = "SELECT dsync_assert_held(%s::text, %s::text)"


def conninfo(using: str = "default") -> str:
    """A libpq connection string for the DATABASES entry using, for the
    dsync Client that holds the locks (it uses psycopg 3 whatever driver
    Django uses)."""
    from django.conf import settings
    db = settings.DATABASES[using]
    params: Dict[str, Any] = {}
    for key, param in (("NAME", "dbname"), ("USER", "user"), ("PASSWORD", "password"),
                       ("HOST", "host"), ("PORT", "port")):
        if db.get(key) not in (None, ""):
            params[param] = str(db[key])
    for key, value in (db.get("OPTIONS") or {}).items():
        # libpq's own options only (sslmode, connect_timeout, ...): the
        # driver's (isolation_level, server_side_binding, ...) are not.
        if isinstance(value, (str, int)) and not isinstance(value, bool) and \
                key not in ("isolation_level", "server_side_binding", "cursor_factory"):
            params[key] = str(value)
    return psycopg.conninfo.make_conninfo(**params)


def _client(using: str, client: Optional[Client]) -> Client:
    """The client given, or the default client of using's database."""
    return client if client is not None else default_client(conninfo(using), None, None, {})


@contextmanager
def translated(what: Optional[str] = None) -> Iterator[None]:
    """Within the block, a Django DatabaseError that is one of dsync's
    (StaleToken, NotHeld, ExtensionNotCreated, NotPreloaded, ...) is raised
    as dsync's exception, Django's as its __cause__; any other passes
    unchanged.  Put it inside transaction.atomic(), or around it."""
    try:
        yield
    except DatabaseError as exc:
        errors.raise_translated(exc, what)
        raise


def guard(lock: Any, using: str = "default") -> int:
    """Inside transaction.atomic(using=using): the fencing token, as an int,
    if the calling thread holds lock (a Lock, ReadLock or Semaphore; or a
    Hold handed over from its owner), else NotHeld (the atomic block is
    then rolled back as the exception leaves it).  From this call until
    that transaction commits nobody else can take the lease, so the writes
    made in it are protected.  Outside an atomic block Django's autocommit
    would end the guard with the statement: TransactionManagementError."""
    conn = connections[using]
    if not conn.in_atomic_block:
        raise TransactionManagementError(
            "dsync.django.guard() must be called inside transaction.atomic(): in autocommit "
            "the guard would end with its own statement and protect nothing")
    lease, holder = guarded_names(lock)
    with translated(f'guarding lease "{lease}"'):
        with conn.cursor() as cur:
            cur.execute(_ASSERT_HELD, [lease, holder])
            return int(cur.fetchone()[0])


def leader_only(name: str, ttl: float = 60, *, release: bool = True, using: str = "default",
                client: Optional[Client] = None) -> Callable[[Callable], Callable]:
    """Decorator: the function runs only where a non-blocking acquire of
    lease name succeeds, and returns None (logging one line) elsewhere.
    For jobs every node schedules (APScheduler, Celery beat on each node,
    cron) and management commands.

    release=True: the lease is renewed while the function runs and given
    back when it returns.  release=False: the lease is held for ttl
    seconds, not renewed and not given back, so that a node whose clock
    or scheduler runs late skips the same run instead of repeating it:
    give a ttl shorter than the schedule's period and longer than the
    job and the nodes' skew.

    The client: the one given, else the default client of the DATABASES
    entry using (settings are read at the first call, not at import)."""
    def decorate(fn: Callable) -> Callable:
        """fn, run only where the lease is taken."""
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            """fn's result where the lease is taken now, else None."""
            # A lock object per call: its holder name is its own, so a run
            # never counts as reentrant with an earlier one on this thread.
            lock = _client(using, client).lock(name, ttl=ttl, keep_alive=release)
            if not lock.acquire(blocking=False):
                log.info('dsync: lease "%s" is held elsewhere; %s skipped here', name,
                         getattr(fn, "__qualname__", fn))
                return None
            try:
                return fn(*args, **kwargs)
            finally:
                if release:
                    lock.release()
        return run
    return decorate


class LeaderOnlyCommand(BaseCommand):
    """A management command that runs on one node at a time: execute()
    takes lease lease_name (default "django-command:" and the command's
    module name) without waiting; on the node that gets it, handle() runs
    with self.lock held and renewed, and the lease is given back after;
    elsewhere it writes one line to stdout and exits cleanly (status 0).
    lease_ttl: seconds (the keeper renews it every third); lease_using: the
    DATABASES entry whose server holds the lease."""

    lease_name: Optional[str] = None
    lease_ttl: float = 60
    lease_using: str = "default"
    lease_client: Optional[Client] = None

    def execute(self, *args: Any, **options: Any) -> Any:
        """Run the command here if this node takes the lease, else say so."""
        name = self.lease_name or "django-command:" + type(self).__module__.rsplit(".", 1)[-1]
        lock = _client(self.lease_using, self.lease_client).lock(name, ttl=self.lease_ttl)
        if not lock.acquire(blocking=False):
            if options.get("stdout"):       # as BaseCommand.execute would take it
                self.stdout = OutputWrapper(options["stdout"])
            self.stdout.write(f'lease "{name}" is held by another node; nothing done here')
            return None
        self.lock = lock
        try:
            return super().execute(*args, **options)
        finally:
            lock.release()
