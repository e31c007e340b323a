# After a start, a crash restart or a promotion, no durable grant of any
# kind is made while an ephemeral holder from before may still believe it
# holds the name (src/leases/ephemeral_record.c).
#
# An ephemeral lease lives in shared memory only: after a restart it is
# gone, but its holder may go on for up to its ttl.  Before 1.5 plain,
# shared, session and dsync_acquire_all grants were held back for that
# long, but a semaphore's permit was not: a semaphore of 1 defined after
# the restart on the name an ephemeral holder had granted its permit at
# once, and two holders overlapped.  With dsync.ephemeral_max_ttl = 15,
# after each of a fast restart, a crash restart (a backend killed with
# SIGKILL) and a promotion, this proves, for names held ephemerally just
# before:
#   1. inside the window (judged by the server's clock, the call's end
#      before the old ephemeral lease's expiry) a plain, session, shared
#      and dsync_acquire_all acquire (wait 0) returns NULL; a semaphore of
#      1 defined after the event grants no permit, one of 2 grants one and
#      not two, a semaphore defined before the event (while the ephemeral
#      lease held its name) grants none, and dsync_acquire_all over the
#      names of that semaphore of 1 and of another semaphore of 2 grants
#      neither;
#   2. afterwards a blocking acquire of each is granted, and the permit
#      of the semaphore of 1 is acquired (acquired_at) not before the old
#      ephemeral lease's expiry.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib '.';
use DsyncTest;

my $max_ttl = 15;
my @conf = ("dsync.ephemeral_max_ttl = $max_ttl", 'restart_after_crash = on');

# The names of one event's case, by what they are used for.
sub names_of
{
	my ($p) = @_;
	return map { $_ => "$_-$p" } qw(pl se sh mu mf s1 s2 sb ma mx);
}

# Ephemeral leases (ttl = dsync.ephemeral_max_ttl) of every name that an
# ephemeral holder will still believe it holds after the event, granted
# once the grace allows; the semaphore sb is defined while its name is
# held.  Returns the earliest of their expiries (text, for SQL).
sub hold_before
{
	my ($node, %n) = @_;
	for my $k (qw(pl se sh mu s1 s2 sb ma))
	{
		like(
			q1($node,
				"SELECT dsync_acquire('$n{$k}', 'eph', '$max_ttl s', '60 s', NULL, durable => false)"),
			qr/^\d+$/,
			"$n{$k} is held ephemerally");
	}
	is(q1($node, "SELECT dsync_semaphore_create('$n{sb}', 1)"), 't',
		"$n{sb} becomes a semaphore of 1 while its name is held ephemerally");
	return q1($node,
		"SELECT min(expires_at) FROM dsync_leases WHERE holder = 'eph' "
		  . "AND lease IN ('$n{pl}', '$n{se}', '$n{sh}', '$n{mu}', '$n{s1}', '$n{s2}', '$n{sb}', '$n{ma}')");
}

# Right after the event: every kind of durable acquire (wait 0) of those
# names, in one statement, with the server's clock at its end.  What is
# granted must not be, if the statement ended before the old leases'
# expiry.  Then blocking acquires, granted once the hold-back is over.
sub check_after
{
	my ($node, $what, $expiry, %n) = @_;
	is( q1($node,
			"SELECT dsync_semaphore_create('$n{s1}', 1) AND dsync_semaphore_create('$n{s2}', 2) "
			  . "AND dsync_semaphore_create('$n{ma}', 1) AND dsync_semaphore_create('$n{mx}', 2)"),
		't',
		"$what: semaphores of 1 and 2 defined on names held ephemerally before");
	my $row = q1($node,
		"SELECT dsync_acquire('$n{pl}', 'd', '60 s') IS NULL, "
		  . "dsync_acquire('$n{se}', 'd', '60 s', session => true) IS NULL, "
		  . "dsync_acquire_shared('$n{sh}', 'd', '60 s') IS NULL, "
		  . "dsync_acquire_all(ARRAY['$n{mf}', '$n{mu}'], 'd', '60 s') IS NULL, "
		  . "dsync_acquire('$n{s1}', 'd', '60 s') IS NULL, "
		  . "dsync_acquire('$n{s2}', 'd1', '60 s') IS NOT NULL, "
		  . "dsync_acquire('$n{s2}', 'd2', '60 s') IS NULL, "
		  . "dsync_acquire('$n{sb}', 'd', '60 s') IS NULL, "
		  . "dsync_acquire_all(ARRAY['$n{mx}', '$n{ma}'], 'd', '60 s') IS NULL, "
		  . "clock_timestamp() < '$expiry'::timestamptz");
	my @got = split /\|/, $row;
	my $before = pop @got;
	if ($before eq 't')
	{
		my @what = (
			'a plain acquire is refused',
			'a session acquire is refused',
			'a shared acquire is refused',
			'dsync_acquire_all of a plain name and a free one is refused',
			'a permit of a semaphore of 1 defined since is refused',
			'a semaphore of 2 grants one permit',
			'... and not a second',
			'a permit of a semaphore defined before is refused',
			'dsync_acquire_all of two semaphores\' names, of 1 and of 2, is refused');
		is($got[$_], 't', "$what, while the ephemeral holder may be live: $what[$_]")
		  for 0 .. $#what;
		is(q1($node, "SELECT count(*) FROM dsync_leases WHERE lease = '$n{s1}'"),
			'0', "$what: the semaphore of 1 has no holder");
		is( q1($node,
				"SELECT count(*) FROM dsync_leases WHERE lease IN ('$n{mx}', '$n{mf}')"),
			'0',
			"$what: dsync_acquire_all took nothing of its sets");
	}
	else
	{
		note("$what: the machine was too slow to call inside the old leases' ttl");
	}

	# Afterwards: each granted, the permit of s1 not before the expiry.
	my $blocking = q1($node,
		"SELECT dsync_acquire('$n{s1}', 'd', '60 s', '60 s') IS NOT NULL, "
		  . "dsync_acquire('$n{s2}', 'd2', '60 s', '60 s') IS NOT NULL, "
		  . "dsync_acquire('$n{sb}', 'd', '60 s', '60 s') IS NOT NULL, "
		  . "dsync_acquire_all(ARRAY['$n{mx}', '$n{ma}'], 'd', '60 s', '60 s') IS NOT NULL, "
		  . "dsync_acquire('$n{pl}', 'd', '60 s', '60 s') IS NOT NULL, "
		  . "dsync_acquire_shared('$n{sh}', 'd', '60 s', '60 s') IS NOT NULL, "
		  . "dsync_acquire_all(ARRAY['$n{mf}', '$n{mu}'], 'd', '60 s', '60 s') IS NOT NULL");
	is($blocking, join('|', ('t') x 7), "$what: blocking acquires of each are granted afterwards");
	is( q1($node,
			"SELECT acquired_at >= '$expiry'::timestamptz FROM dsync_leases "
			  . "WHERE lease = '$n{s1}' AND holder = 'd'"),
		't',
		"$what: ... the permit of the semaphore of 1 not before the old lease's expiry");
	is(q1($node, "SELECT count(*) FROM dsync_leases WHERE lease = '$n{s2}'"),
		'2', "$what: the semaphore of 2 has its two holders");
	return;
}

my $node = dsync_node('primary', @conf);

# 1. A fast restart.
my %n = names_of('start');
my $expiry = hold_before($node, %n);
$node->restart(mode => 'fast');
check_after($node, 'start', $expiry, %n);

# 2. A crash restart: a backend killed with SIGKILL.
%n = names_of('crash');
$expiry = hold_before($node, %n);
my $victim = $node->background_psql('postgres');
my $victim_pid = $victim->query_safe('SELECT pg_backend_pid()');
is(kill('KILL', $victim_pid), 1, 'crash: a backend killed with SIGKILL');
eval { $victim->quit };
ok($node->poll_query_until('postgres', 'SELECT pg_is_in_recovery() = false'),
	'crash: the server accepts connections again');
ok(scalar(grep { /terminated by signal 9/ } split /\n/, slurp_file($node->logfile)),
	'crash: the server log shows a crash restart');
check_after($node, 'crash restart', $expiry, %n);

# 3. A promotion.  The standby replays the record of ephemeral use.
$node->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($node, 'b', has_streaming => 1);
$standby->start;
stop_at_end($standby);
%n = names_of('promotion');
$expiry = hold_before($node, %n);
$node->wait_for_catchup($standby);
$node->stop('immediate');
$standby->promote;
ok($standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'),
	'the standby is promoted');
check_after($standby, 'promotion', $expiry, %n);

done_testing();
