#!/usr/bin/env bash
#
# queue_handoff_bench.sh: 16 waiters on one name hand it on as fast as they
# can, waiting in a backend (dsync_acquire with a wait) or in the line
# without one (dsync_queue, woken by the grant's notification), in both
# commit modes, in one run.
#
# Run as root, after `make install`, from the top of the source tree:
#
#     bash test/bench/queue_handoff_bench.sh
#
# It starts a throwaway PostgreSQL server of its own (test/bench/server.sh;
# default settings otherwise), builds the libpq driver queue_handoff.c (one
# thread, non-blocking libpq: the server's figures, not a client library's
# threads; wait_bench.py measures the same through Python threads) and
# runs it: per side and commit mode, hand-offs/s (median of the rounds),
# the hand-off latency (a release's result to the next holder's grant seen)
# and transaction ids per hand-off.  Figures are printed, never asserted.
#
# BENCH_WAITERS (16), BENCH_ROUNDS (3), BENCH_SECONDS (4), BENCH_MODES
# (on,off).  PGBIN names the server's binaries.
set -euo pipefail
cd "$(dirname "$0")/../.."
top=$(pwd)
. "$top/test/bench/server.sh"
bench_server_start queue-handoff ""
q postgres "CREATE EXTENSION dsync"
bench_build queue_handoff
bench_header "queue_handoff_bench: ${BENCH_WAITERS:-16} waiters on one name, backend waits against queued waits"
bench_driver queue_handoff -w "${BENCH_WAITERS:-16}" -r "${BENCH_ROUNDS:-3}" \
	-s "${BENCH_SECONDS:-4}" -m "${BENCH_MODES:-on,off}" | grep -v '^@ '
