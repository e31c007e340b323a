# Waiters queued without a connection (dsync_queue) under faults: no grant
# to two holders, no waiter left queued for ever, no token going back.
#
#  1. The grant is announced on the waiter's own channel
#     (dsync_queue_channel), by the releasing transaction, with the token.
#  2. The connection that queued is killed: the place is not tied to it;
#     renewed from another connection, it is granted in turn.
#  3. A client that dies (SIGKILL) while queued stops renewing: its place
#     lapses after its ttl and the next waiter is granted; one that dies
#     (or is stopped) just granted never claims: at the claim window's end
#     the lease passes to the next in line, with a greater token.
#  4. A crash and restart with a queue: the places are gone (their clients
#     queue again), the holder keeps its lease, and a grant committed
#     before the crash stays with its waiter, whose queueing again returns
#     the same token.
#  5. A synchronous standby: a grant the worker makes (at an expiry) to a
#     waiter that queued with synchronous_commit = on waits for the standby
#     before anybody sees it, though the worker commits its own work
#     without a flush.  Failover: the grant a release made to a queued
#     waiter is on the standby when the release returns; on the promoted
#     standby the waiter holds it with that token, and the next grant's
#     token is greater.
#  6. A full table: places that lapsed unswept (nothing woke the worker)
#     make room for a new waiter, in any database; live ones do not.
use strict;
use warnings;

use IPC::Run;
use Time::HiRes qw(usleep time);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib '.';
use DsyncTest;

my $node = dsync_node('queue_faults', 'dsync.claim_window = 1000');
$node->backup('base');

# 1. The announcement.
my $listener = Listener->new($node);
my $channel = q1($node, "SELECT dsync_queue_channel('tap-proc')");
is($channel, 'dsyncq:tap-proc', 'the queue channel of a short name is readable');
$listener->{psql}->query_safe(qq{LISTEN "$channel"});
q1($node, "SELECT dsync_acquire('qa', 'h', '60 s')");
is(q1($node, "SELECT dsync_queue('qa', 'w', '60 s', 'tap-proc') IS NULL"),
	't', 'w is queued');
q1($node, "SELECT dsync_release('qa', 'h')");
my @got = $listener->take($channel, 1);
is(scalar(@got), 1, 'one notification on the queue channel');
is($got[0]{json}{event}, 'granted', 'it says granted');
is($got[0]{json}{holder}, 'w', 'to w');
is($got[0]{json}{lease}, 'qa', 'of qa');
is($got[0]{json}{fencing}, q1($node, "SELECT fencing FROM dsync_leases WHERE lease = 'qa'"),
	'with the token of the lease');
is(q1($node, "SELECT dsync_release('qa', 'w')"), 't', 'w releases without claiming');
$listener->quit;

# 2. The connection that queued is killed.
my $c = psql_client($node, $node->safe_psql('postgres', 'SELECT current_user'));
q1($node, "SELECT dsync_acquire('qb', 'h', '60 s')");
ok(send_wait($c, "SELECT 'queued:' || (dsync_queue('qb', 'w', '3 s') IS NULL);", qr/queued:t/),
	'w queues on a connection of its own');
my $pid = q1($node,
	"SELECT pid FROM pg_stat_activity WHERE query LIKE '%dsync_queue(''qb''%' AND pid <> pg_backend_pid()"
);
q1($node, "SELECT pg_terminate_backend($pid)");
ok(wait_for($node, "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid"),
	'that connection is gone');
is(q1($node, "SELECT state FROM dsync_claim('qb', 'w')"), 'queued',
	'the place is still there, renewed from another connection');
q1($node, "SELECT dsync_release('qb', 'h')");
is(q1($node, "SELECT state FROM dsync_claim('qb', 'w')"), 'granted', 'and granted in turn');
q1($node, "SELECT dsync_release('qb', 'w')");

# 3. A client that dies while queued, and one that dies just granted.
q1($node, "SELECT dsync_acquire('qc', 'h', '60 s')");
my $dead = psql_client($node, $node->safe_psql('postgres', 'SELECT current_user'));
ok(send_wait($dead, "SELECT 'queued:' || (dsync_queue('qc', 'dead', '1 s') IS NULL);",
		qr/queued:t/),
	'a client queues with a 1 s ttl');
$dead->{h}->kill_kill;
is(q1($node, "SELECT dsync_queue('qc', 'next', '60 s') IS NULL"), 't', 'next queues behind it');
ok(wait_for($node, "SELECT count(*) = 0 FROM dsync_waiters WHERE holder = 'dead'"),
	'the dead client\'s place lapses');
q1($node, "SELECT dsync_release('qc', 'h')");
is(q1($node, "SELECT dsync_leader('qc')"), 'next', 'the lease goes to the next one');
my $t_next = q1($node, "SELECT fencing FROM dsync_claim('qc', 'next')");
is(q1($node, "SELECT dsync_queue('qc', 'after', '60 s') IS NULL"), 't', 'after queues');
q1($node, "SELECT dsync_queue('qc', 'gone', '60 s')");
# next's release grants to after, whose client dies before claiming.
q1($node, "SELECT dsync_release('qc', 'next')");
is(q1($node, "SELECT dsync_leader('qc')"), 'after', 'after is granted');
my $t_after = q1($node, "SELECT fencing FROM dsync_leases WHERE lease = 'qc'");
ok(wait_for($node, "SELECT dsync_leader('qc') IS DISTINCT FROM 'after'"),
	'unclaimed, the grant passes on');
is(q1($node, "SELECT dsync_leader('qc')"), 'gone', 'to the next in line');
my $t_gone = q1($node, "SELECT fencing FROM dsync_leases WHERE lease = 'qc'");
ok($t_next < $t_after && $t_after < $t_gone, 'tokens rise through the passes');
is(q1($node, "SELECT state FROM dsync_claim('qc', 'after')"), 'gone',
	'the late claim finds it gone');
is(q1($node, "SELECT dsync_renew('qc', 'after') IS NULL"), 't', 'and so does a late renewal');
is(q1($node, "SELECT state FROM dsync_claim('qc', 'gone')"), 'granted', 'the next one claims');
q1($node, "SELECT dsync_release('qc', 'gone')");

# 4. A crash and restart with a queue.
q1($node, "SELECT dsync_acquire('qd', 'h', '60 s')");
q1($node, "SELECT dsync_queue('qd', 'w1', '60 s')");
q1($node, "SELECT dsync_acquire('qe', 'h', '60 s')");
q1($node, "SELECT dsync_queue('qe', 'w2', '60 s')");
q1($node, "SELECT dsync_release('qe', 'h')");
my $t_w2 = q1($node, "SELECT fencing FROM dsync_leases WHERE lease = 'qe'");
crash_restart($node);
is(q1($node, "SELECT count(*) FROM dsync_waiters"), '0', 'after a crash nobody is queued');
is(q1($node, "SELECT state FROM dsync_claim('qd', 'w1')"), 'gone',
	'a waiter finds its place gone');
is(q1($node, "SELECT dsync_leader('qd')"), 'h', 'the holder keeps its lease');
is(q1($node, "SELECT dsync_leader('qe')"), 'w2',
	'a grant committed before the crash stays with its waiter');
is(q1($node, "SELECT dsync_queue('qe', 'w2', '60 s')"), $t_w2,
	'which gets the same token by queueing again');
is(q1($node, "SELECT dsync_queue('qd', 'w1', '60 s') IS NULL"), 't', 'w1 queues again');
q1($node, "SELECT dsync_release('qd', 'h')");
is(q1($node, "SELECT state FROM dsync_claim('qd', 'w1')"), 'granted', 'and is granted');

# 5. Failover to a synchronous standby.
my $standby = PostgreSQL::Test::Cluster->new('queue_standby');
$standby->init_from_backup($node, 'base', has_streaming => 1);
$standby->start;
stop_at_end($standby);
$node->append_conf('postgresql.conf', "synchronous_standby_names = 'queue_standby'");
$node->reload;
ok(wait_for($node, "SELECT count(*) = 1 FROM pg_stat_replication WHERE sync_state = 'sync'"),
	'the standby is synchronous');
my $walsender = q1($node, "SELECT pid FROM pg_stat_replication");
q1($node, "SELECT dsync_acquire('qg', 'h', '1 s')");
q1($node, "SELECT dsync_queue('qg', 'w', '60 s')");
is(kill('STOP', $walsender), 1, 'the standby\'s walsender is stalled');
ok( wait_for($node,
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'dsync reaper' "
		  . "AND datname = 'postgres' AND wait_event = 'SyncRep'"),
	'the worker\'s grant at the expiry waits for the standby');
is(q1($node, "SELECT dsync_leader('qg') IS NULL"), 't', 'and is not seen before it confirms');
kill('CONT', $walsender);
ok(wait_for($node, "SELECT dsync_leader('qg') = 'w'"), 'then it is');
q1($node, "SELECT dsync_release('qg', 'w')");
q1($node, "SELECT dsync_acquire('qf', 'h', '60 s')");
q1($node, "SELECT dsync_queue('qf', 'w', '60 s')");
q1($node, "SELECT dsync_release('qf', 'h')");
my $t_w = q1($node, "SELECT fencing FROM dsync_leases WHERE lease = 'qf'");
$node->stop('immediate');
$standby->promote;
is(q1($standby, "SELECT dsync_leader('qf')"), 'w', 'the promoted standby has the grant');
is(q1($standby, "SELECT dsync_queue('qf', 'w', '60 s')"), $t_w, 'with its token');
q1($standby, "SELECT dsync_release('qf', 'w')");
ok(q1($standby, "SELECT dsync_acquire('qf', 'x', '60 s')") > $t_w,
	'the next grant\'s token is greater');

# 6. A full table.
$standby->append_conf('postgresql.conf', 'dsync.max_queued_waiters = 3');
$standby->restart;
$standby->safe_psql('postgres', 'CREATE DATABASE other');
$standby->safe_psql('other', 'CREATE EXTENSION dsync');
q1($standby, "SELECT dsync_acquire('full', 'h', '60 s')");
$standby->safe_psql('other', "SELECT dsync_acquire('full', 'h', '60 s')");
q1($standby, "SELECT dsync_queue('full', 'w' || i, '8 s') FROM generate_series(1, 2) i");
$standby->safe_psql('other', "SELECT dsync_queue('full', 'w3', '8 s')");
my $queued_at = time;
my ($rc, $out, $err) = $standby->psql('postgres', "SELECT dsync_queue('full', 'w4', '60 s')");
like($err, qr/too many queued waiters/, 'a table full of live places refuses a fourth');
my $tool = IPC::Run::start(
	[ 'dsync', '--dsn', $standby->connstr('postgres'), 'lock', 'full', '--wait', '500ms',
		'--', 'true' ],
	'<', \undef, '>', \my $tout, '2>', \my $terr);
$tool->finish;
is($tool->result(0), 75, 'dsync lock on a full table waits in a backend instead (and its wait runs out)');
like($terr, qr/waiting in a backend: too many queued waiters/, 'and says why');
cmp_ok(time - $queued_at, '<', 8, '(all while the places were live)');
usleep(8_200_000);
is(q1($standby, "SELECT dsync_queue('full', 'w4', '60 s') IS NULL"), 't',
	'once they lapsed, unswept, a new waiter finds room');
is($standby->safe_psql('other', "SELECT dsync_queue('full', 'w5', '60 s') IS NULL"), 't',
	'in another database too');
is(q1($standby, "SELECT string_agg(holder, ',') FROM dsync_waiters WHERE name = 'full'"), 'w4',
	'and only the live place is listed');

done_testing();
