#!/usr/bin/env bash
#
# queue_scale_bench.sh: what waiters queued without a connection
# (dsync_queue) cost as their number grows, from 100 to 100,000, on many
# names (one waiter each) and on one name (all in one line).
#
# Run as root, after `make install`, from the top of the source tree:
#
#     bash test/bench/queue_scale_bench.sh
#
# It starts a throwaway PostgreSQL server of its own (test/bench/server.sh)
# with dsync.max_queued_waiters = 220000 and synchronous_commit = off, and
# runs test/bench/queue_scale.py, whose header says what each column is:
# the time to queue N waiters, the queue tables' shared memory, the dsync
# worker's private memory, every server process's CPU while N waiters sit
# queued, one dsync_queue_pass() (the worker's pass), the hand-off latency
# from a release to the grant's notification, and how lapsed places go.
# Figures are printed, never asserted.
#
# BENCH_SIZES (100,1000,10000,100000), BENCH_IDLE (seconds of idle
# measured, 5), BENCH_SAMPLES (hand-offs per size, 200).  PGBIN names the
# server's binaries (default /usr/lib/postgresql/15/bin).
set -euo pipefail
cd "$(dirname "$0")/../.."
top=$(pwd)
. "$top/test/bench/server.sh"
bench_server_start queue-scale "dsync.max_queued_waiters = 220000
synchronous_commit = off"
q postgres "CREATE EXTENSION dsync"
echo "queue_scale_bench: $(nproc) CPUs, PostgreSQL $(q postgres 'SHOW server_version'), dsync $(q postgres "SELECT extversion FROM pg_extension WHERE extname = 'dsync'")"
/usr/bin/python3 "$top/test/bench/queue_scale.py"
