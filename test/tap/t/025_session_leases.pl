# Session leases: dsync_acquire(..., session => true) is released when the
# acquiring backend ends, not only when its ttl passes.
#
# This test proves, through a real socket (psql clients as role app):
#   - a client killed with SIGKILL: its session lease is released at once
#     (a blocked waiter is granted it; measured from the kill to the
#     waiter's grant, median of 3 rounds at most 100 ms), while its plain
#     lease stays held until its ttl;
#   - the same for an ephemeral session lease, a terminated backend
#     (pg_terminate_backend), a client that disconnects normally, and a
#     shared lease (dsync_acquire_shared) with an exclusive waiter;
#   - a session acquire rolled back (also to a savepoint) leaves nothing to
#     release and no record; a reentrant acquire keeps one record;
#   - after a crash restart (a backend killed with SIGKILL) the session
#     lease of a client from before is released by the reaper, and a
#     plain lease of that client is still held;
#   - bad input: session => NULL is an error (22004).
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use lib '.';
use DsyncTest qw(psql_client send_wait);

my $timeout = 60;

my $node = PostgreSQL::Test::Cluster->new('session');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'dsync'\nrestart_after_crash = on\n"
	  . "dsync.ephemeral_max_ttl = 2\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dsync; CREATE ROLE app LOGIN');


sub q1 { return $node->safe_psql('postgres', $_[0]); }

# A psql client as role app (DsyncTest's psql_client).
sub client { return psql_client($node, 'app'); }

# The client program's pid (psql), to kill it as a crash would.
sub client_pid { return $_[0]->{h}{KIDS}[0]{PID}; }

sub poll
{
	my ($sql) = @_;
	my $deadline = time + $timeout;
	while (time < $deadline)
	{
		my $v = $node->safe_psql('postgres', $sql);
		return 1 if $v eq 't';
		usleep(5_000);
	}
	return 0;
}

# A listener, so that events are logged (dsync_events_since tells a release
# from an expiry below).
my $listener = client();
$listener->{in} .= "LISTEN \"dsync:any\";\n";
$listener->{h}->pump_nb while length $listener->{in};

# --- a killed client: released at once, a waiter granted -----------------------

my @took;
for my $round (1 .. 3)
{
	my $a = client();
	ok(send_wait($a, "SELECT dsync_acquire('s1', 'a$round', '1 hour', session => true) > 0 AS got;"
			  . " SELECT dsync_acquire('n$round', 'a$round', '1 hour') > 0 AS plain;", qr/t\nt\n/),
		"round $round: a session lease and a plain lease are granted");
	my $w = client();
	$w->{in} .= "SELECT 'granted ' || extract(epoch FROM clock_timestamp()) FROM "
	  . "(SELECT dsync_acquire('s1', 'w$round', '1 minute', '30 seconds')) g;\n";
	$w->{h}->pump_nb while length $w->{in};
	ok(poll("SELECT count(*) = 1 FROM dsync_waiters WHERE name = 's1'"), "round $round: a waiter is blocked");
	my $killed_at = time;
	kill 'KILL', client_pid($a);
	ok(send_wait($w, '', qr/granted (\d+\.\d+)/), "round $round: the waiter is granted the session lease");
	my ($granted_at) = $w->{out} =~ /granted (\d+\.\d+)/;
	push @took, ($granted_at - $killed_at) * 1000;
	note(sprintf('round %d: granted %.1f ms after the client was killed', $round, $took[-1]));
	is(q1("SELECT dsync_leader('n$round')"), "a$round", "round $round: the plain lease is still held");
	q1("SELECT dsync_release('s1', 'w$round')");
	$w->{in} .= "\\q\n";
	$w->{h}->finish;
}
my @sorted = sort { $a <=> $b } @took;
cmp_ok($sorted[1], '<=', 100, 'median from the kill to the waiter\'s grant at most 100 ms');
cmp_ok($sorted[2], '<', 1000, 'and every one below 1 s');
is(q1("SELECT count(*) FROM dsync_session"), '0', 'no session record is left');

# --- ephemeral, terminated, and a normal disconnect --------------------------------

my $e = client();
# Ephemeral grants wait for dsync.ephemeral_max_ttl after a start.
ok(send_wait($e, "SELECT dsync_acquire('e1', 'e', '2 seconds', '10 seconds', durable => false,"
		  . " session => true) > 0;", qr/t\n/), 'an ephemeral session lease is granted');
kill 'KILL', client_pid($e);
ok(poll("SELECT dsync_leader('e1') IS NULL"), 'and released when its client is killed');

# Released, not expired: the last event of each name says which.
sub last_event
{
	my ($name) = @_;
	my $sql = "SELECT payload->>'event' FROM dsync_events_since(0, ARRAY['$name']) ORDER BY seq DESC LIMIT 1";
	poll("SELECT ($sql) IS NOT NULL");
	return q1($sql);
}
is(last_event('e1'), 'released', 'released, not expired');

my $t = client();
ok(send_wait($t, "SELECT dsync_acquire('t1', 't', '1 hour', session => true) > 0;", qr/t\n/),
	'a session lease for a backend to be terminated');
q1("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'app' AND query LIKE '%''t1''%'");
ok(poll("SELECT dsync_leader('t1') IS NULL"), 'released when its backend is terminated');
is(last_event('t1'), 'released', 'with a released event');

my $d = client();
ok(send_wait($d, "SELECT dsync_acquire('d1', 'd', '1 hour', session => true) > 0;", qr/t\n/),
	'a session lease for a client that disconnects');
$d->{in} .= "\\q\n";
$d->{h}->finish;
ok(poll("SELECT dsync_leader('d1') IS NULL"), 'released when it disconnects normally');

# A shared session lease (dsync_acquire_shared): an exclusive waiter is
# granted the name once the shared holder's client is killed.
my $sh = client();
ok(send_wait($sh, "SELECT dsync_acquire_shared('sh1', 's', '1 hour', session => true) > 0;", qr/t\n/),
	'a shared session lease is granted');
my $shw = client();
$shw->{in} .= "SELECT 'granted ' || (g.t > 0) FROM "
  . "(SELECT dsync_acquire('sh1', 'w', '1 minute', '30 seconds') AS t) g;\n";
$shw->{h}->pump_nb while length $shw->{in};
ok(poll("SELECT count(*) = 1 FROM dsync_waiters WHERE name = 'sh1'"), 'an exclusive waiter queues behind it');
my $sh_killed_at = time;
kill 'KILL', client_pid($sh);
ok(send_wait($shw, '', qr/granted true/), 'the exclusive waiter is granted once the shared holder\'s client is killed');
note(sprintf('shared: granted %.1f ms after the client was killed', (time - $sh_killed_at) * 1000));
is(q1("SELECT string_agg(holder || ' ' || mode, ',') FROM dsync_leases WHERE lease = 'sh1'"), 'w exclusive',
	'the waiter alone holds it, exclusively');
ok(poll("SELECT count(*) = 1 FROM dsync_events_since(0, ARRAY['sh1']) WHERE payload->>'holder' = 's' "
		  . "AND payload->>'event' = 'released' AND payload->>'mode' = 'shared'"),
	'the shared holder\'s release is an event with "mode":"shared"');
q1("SELECT dsync_release('sh1', 'w')");

# --- rollbacks and reentrant acquires --------------------------------------------

my $r = client();
ok(send_wait($r, "BEGIN; SELECT dsync_acquire('r1', 'r', '1 hour', session => true) > 0; ROLLBACK;"
		  . " BEGIN; SAVEPOINT sp; SELECT dsync_acquire('r2', 'r', '1 hour', session => true) > 0;"
		  . " ROLLBACK TO sp; SELECT dsync_acquire('r3', 'r', '1 hour') > 0; COMMIT;"
		  . " SELECT dsync_acquire('r4', 'r', '1 hour', session => true) > 0;"
		  . " SELECT dsync_acquire('r4', 'r', '1 hour', session => true) > 0;"
		  . " SELECT 'count ' || count(*) FROM dsync_leases WHERE lease LIKE 'r_';", qr/count \d+/),
	'session acquires rolled back, a plain one and a reentrant one');
is(q1("SELECT string_agg(lease, ',' ORDER BY lease) FROM dsync_leases WHERE lease LIKE 'r_'"),
	'r3,r4', 'the rolled-back grants are gone, the others held');
is(q1("SELECT count(*) FROM dsync_session"), '1', 'one session record, for r4');
$r->{in} .= "\\q\n";
$r->{h}->finish;
ok(poll("SELECT dsync_leader('r4') IS NULL"), 'r4 is released with the session');
is(q1("SELECT dsync_leader('r3')"), 'r', 'the plain lease r3 is not');

# A session grant acquired again (same holder, same token) by another
# backend with session => true moves there: the first backend's end does
# not release it, the second's does.
my $m1 = client();
ok(send_wait($m1, "SELECT dsync_acquire('mv', 'm', '1 hour', session => true) > 0;", qr/t\n/),
	'backend 1 takes a session lease');
my $m2 = client();
ok(send_wait($m2, "SELECT dsync_acquire('mv', 'm', '1 hour', session => true) > 0;", qr/t\n/),
	'backend 2 acquires it again as a session lease');
$m1->{in} .= "\\q\n";
$m1->{h}->finish;
usleep(200_000);
is(q1("SELECT dsync_leader('mv')"), 'm', 'backend 1 ends: still held (it is backend 2\'s now)');
$m2->{in} .= "\\q\n";
$m2->{h}->finish;
ok(poll("SELECT dsync_leader('mv') IS NULL"), 'backend 2 ends: released');

# A session lease released and then taken again without session => true is
# not released when the backend ends; a release rolled back keeps it one.
my $u = client();
ok(send_wait($u, "SELECT dsync_acquire('un', 'u', '1 hour', session => true) > 0;"
		  . " SELECT dsync_release('un', 'u'); SELECT dsync_acquire('un', 'u', '1 hour') > 0;"
		  . " SELECT dsync_acquire('rb', 'u', '1 hour', session => true) > 0;"
		  . " BEGIN; SELECT dsync_release('rb', 'u'); ROLLBACK; SELECT 'done';", qr/done/),
	'a session lease released and taken again plainly; another released in a rollback');
is(q1("SELECT count(*) FROM dsync_session"), '1', 'one session record is left (rb)');
$u->{in} .= "\\q\n";
$u->{h}->finish;
ok(poll("SELECT dsync_leader('rb') IS NULL"), 'rb is released with the session');
is(q1("SELECT dsync_leader('un')"), 'u', 'un, taken again without session, is not');

# The session's own settings do not stop the release at its end.
my $ro = client();
ok(send_wait($ro, "SET default_transaction_read_only = on; SET lock_timeout = '1ms';"
		  . " BEGIN READ WRITE; SELECT dsync_acquire('ro', 'r', '1 hour', session => true) > 0; COMMIT;"
		  . " SELECT 'done';", qr/done/),
	'a session lease taken in a read-only session');
$ro->{in} .= "\\q\n";
$ro->{h}->finish;
ok(poll("SELECT dsync_leader('ro') IS NULL"), 'and released when it ends');

my ($ret, $out, $err);
$ret = $node->psql('postgres', "SELECT dsync_acquire('x', 'h', session => NULL)",
	stdout => \$out, stderr => \$err, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/22004: argument "session" must not be null/, 'session => NULL is refused (22004)');

# --- a crash restart --------------------------------------------------------------

my $c = client();
ok(send_wait($c, "SELECT dsync_acquire('c1', 'c', '1 hour', session => true) > 0;"
		  . " SELECT dsync_acquire('c2', 'c', '1 hour') > 0;", qr/t\nt\n/),
	'a session lease and a plain lease before the crash');
is(q1("SELECT count(*) FROM dsync_session"), '1', 'the session grant is recorded');
my $victim = q1("SELECT pid FROM pg_stat_activity WHERE usename = 'app' AND query LIKE '%''c2''%'");
kill 'KILL', $victim;
$c->{h}->kill_kill;
my $crashed_at = time;
# The postmaster restarts every backend; wait until it takes connections.
my $up = 0;
for (1 .. 600)
{
	last if ($up = $node->psql('postgres', 'SELECT 1') == 0);
	usleep(100_000);
}
ok($up, 'the server is back after the crash');
ok(poll("SELECT dsync_leader('c1') IS NULL"), 'the session lease from before the crash is released');
is(last_event('c1'), 'released', 'with a released event');
note(sprintf('released %.2f s after the crash', time - $crashed_at));
is(q1("SELECT dsync_leader('c2')"), 'c', 'the plain lease from before the crash is still held');
is(q1("SELECT count(*) FROM dsync_session"), '0', 'and the record is gone');

done_testing();
