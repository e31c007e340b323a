"""The SQL the library sends, and the LISTEN channel of a name.

Every statement casts its parameters to the SQL types of the interface,
so that a Python int or float ttl, a dict as info, or a str name never
meets PostgreSQL's "function does not exist" for an unknown or smallint
argument.
"""

from __future__ import annotations

import hashlib

ACQUIRE = ("SELECT dsync_acquire(%s::text, %s::text, %s::interval, "
           "%s::interval, %s::jsonb)")
ACQUIRE_SHARED = ("SELECT dsync_acquire_shared(%s::text, %s::text, %s::interval, "
                  "%s::interval, %s::jsonb)")
RENEW = "SELECT dsync_renew(%s::text, %s::text, %s::interval)"
# The keeper's one statement per tick: every due lease, in the given order.
RENEW_MANY = ("SELECT dsync_renew(u.n, u.h, u.t)"
              " FROM unnest(%s::text[], %s::text[], %s::interval[]) WITH ORDINALITY"
              " AS u(n, h, t, i) ORDER BY u.i")
RELEASE = "SELECT dsync_release(%s::text, %s::text)"
RELEASE_MANY = ("SELECT count(*) FILTER (WHERE dsync_release(u.n, u.h))"
                " FROM unnest(%s::text[], %s::text[]) AS u(n, h)")
# The keeper's renewals and releases wait at most 50 ms for a row another
# transaction has locked (a guard, dsync_assert_held, keeps its lease's row
# locked until its transaction ends; one long guarded transaction must not
# hold up every other lease of the client).  The lock_timeout is set in the
# statement itself, before any row is touched, so that each is one
# statement in a transaction of its own: a keeper stopped between round
# trips (SIGSTOP, a paused VM) would otherwise leave its transaction open
# and the rows it renewed locked, and no one could take those leases.
_KEEPER_LOCK_WAIT = ("WITH s AS MATERIALIZED"
                     " (SELECT set_config('lock_timeout', '50ms', true) AS x) ")
KEEPER_RENEW_MANY = (_KEEPER_LOCK_WAIT + "SELECT dsync_renew(u.n, u.h, u.t)"
                     " FROM s, unnest(%s::text[], %s::text[], %s::interval[]) WITH ORDINALITY"
                     " AS u(n, h, t, i) WHERE s.x IS NOT NULL ORDER BY u.i")
KEEPER_RELEASE_MANY = (_KEEPER_LOCK_WAIT + "SELECT count(*) FILTER (WHERE dsync_release(u.n, u.h))"
                       " FROM s, unnest(%s::text[], %s::text[]) AS u(n, h) WHERE s.x IS NOT NULL")
# Waiting without a connection (dsync 1.5): get in line, see where the
# place stands (renewing it), leave the line.
QUEUE = ("SELECT dsync_queue(%s::text, %s::text, %s::interval, %s::text, %s::boolean)")
CLAIM = ("SELECT state, fencing, extract(epoch FROM expires_in)::float8"
         " FROM dsync_claim(%s::text, %s::text)")
UNQUEUE = "SELECT dsync_unqueue(%s::text, %s::text)"
ASSERT_HELD = "SELECT dsync_assert_held(%s::text, %s::text)"
HELD = "SELECT fencing FROM dsync_leases WHERE lease = %s::text AND holder = %s::text"
LOCKED = "SELECT EXISTS (SELECT 1 FROM dsync_leases WHERE lease = %s::text)"
LEASE_STATE = ("SELECT lease, holder, fencing, expires_at FROM dsync_leases"
               " WHERE lease = ANY(%s::text[]) ORDER BY lease, holder")
LEADER = "SELECT dsync_leader(%s::text)"
SEM_CREATE = "SELECT dsync_semaphore_create(%s::text, %s::int)"
SEM_PERMITS = "SELECT permits FROM dsync_semaphores WHERE name = %s::text"
EVENT_SET = "SELECT dsync_event_set(%s::text)"
EVENT_WAIT = "SELECT dsync_event_wait(%s::text, %s::interval)"
EVENT_CLEAR = "SELECT dsync_event_clear(%s::text)"
EVENT_IS_SET = "SELECT dsync_event_is_set(%s::text)"
# A campaign's periodic look: refresh the membership, see who leads.
JOIN = ("SELECT dsync_join(%s::text, %s::text, %s::interval, %s::jsonb),"
        " dsync_leader(%s::text)")
LEAVE = "SELECT dsync_leave(%s::text, %s::text)"
MEMBERS = ("SELECT member, info, joined_at, expires_at, is_leader"
           " FROM dsync_members(%s::text) ORDER BY member")
CHANNELS = "SELECT n, dsync_channel(n) FROM unnest(%s::text[]) AS n"
BACKEND_PID = "SELECT pg_backend_pid()"
SENDERS = "SELECT * FROM dsync_stats"
# Where the log stands: its newest event, or the last number handed out.
LOG_TOP = ("SELECT GREATEST(COALESCE((SELECT seq FROM dsync_event_log"
           " ORDER BY seq DESC LIMIT 1), 0), dsync_events_horizon())")
RETENTION = ("SELECT extract(epoch FROM"
             " current_setting('dsync.event_retention')::interval)::float8")
# The horizon and the events after a seq, in one snapshot (no prune between).
CATCH_UP = ("SELECT h.h, e.seq, e.channel, e.payload::text"
            " FROM dsync_events_horizon() AS h(h)"
            " LEFT JOIN dsync_events_since(%s::bigint, %s::text[]) AS e ON true"
            " ORDER BY e.seq")

# NAMEDATALEN - 1: the longest channel name PostgreSQL keeps.
_CHANNEL_MAX = 63


def channel_of(name: str) -> str:
    """The channel dsync notifies for name, as dsync_channel() computes it
    (src/events/channel.c): "dsync:" and the name when that fits a channel name,
    else "dsync#" and 56 hex digits of the name's SHA-256.  Names are
    encoded as UTF-8, the server encoding the keeper checks for."""
    raw = name.encode("utf-8")
    if 6 + len(raw) <= _CHANNEL_MAX:
        return "dsync:" + name
    return "dsync#" + hashlib.sha256(raw).hexdigest()[:56]


def listen_statement(channels) -> str:
    """One simple-query string that LISTENs on every channel (one round
    trip however many there are)."""
    return "".join(f'LISTEN "{ch.replace(chr(34), chr(34) * 2)}";' for ch in channels)


def unlisten_statement(channels) -> str:
    return "".join(f'UNLISTEN "{ch.replace(chr(34), chr(34) * 2)}";' for ch in channels)
