# A name held ephemerally before a restart or promotion is not granted
# durably while that holder may still believe it holds it.
#
# An ephemeral lease lives in shared memory only; after a restart its
# holder may still believe it holds the name for up to its ttl.  Ephemeral
# grants wait out dsync.ephemeral_max_ttl after a start; durable grants of
# a name nobody holds durably must too, in a database whose ephemeral
# leases were in use (the record in dsync_ephemeral_seq,
# src/leases/ephemeral_record.c).  With dsync.ephemeral_max_ttl = 6 this proves:
#   1. after pg_ctl restart -m fast, a durable acquire (wait 0) of a name
#      held ephemerally before returns NULL while that lease may be live,
#      and a blocking one is granted, but never before the old lease's
#      expiry (server clock);
#   2. in another database of the same server that never used ephemeral
#      leases, a durable acquire right after the restart is granted at once;
#   3. the same across a promotion: the standby, promoted, holds back the
#      durable grant of a name the old primary held ephemerally.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib '.';
use DsyncTest;

my $max_ttl = 6;
my @conf = ("dsync.ephemeral_max_ttl = $max_ttl");

# An ephemeral lease of $ttl seconds, granted once the grace allows (wait
# 30 s); its expiry as the server sees it (text, comparable in SQL).
sub hold_ephemeral
{
	my ($node, $lease, $holder, $ttl) = @_;
	my $token = q1($node,
		"SELECT dsync_acquire('$lease', '$holder', '$ttl s', '30 s', NULL, durable => false)");
	like($token, qr/^\d+$/, "an ephemeral lease of $lease is granted");
	return q1($node,
		"SELECT expires_at FROM dsync_leases WHERE lease = '$lease' AND holder = '$holder'");
}

# Right after a start: a durable acquire with wait 0 of a name held
# ephemerally before must be NULL whenever the call ended before the old
# lease's expiry; then a blocking one must be granted, not before it.
sub durable_after_start
{
	my ($node, $what, $lease, $old_expiry) = @_;
	my ($is_null, $before) = split /\|/, q1($node,
		"SELECT t IS NULL, clock_timestamp() < '$old_expiry'::timestamptz "
		  . "FROM (SELECT dsync_acquire('$lease', 'new', '5 s', '0') AS t OFFSET 0) a");
	if ($before eq 't')
	{
		is($is_null, 't',
			"$what: a durable acquire (wait 0) while the ephemeral holder may be live returns NULL");
	}
	else
	{
		note("$what: the machine was too slow to call inside the old lease's ttl");
	}
	my ($token, $not_before) = split /\|/, q1($node,
		"SELECT coalesce(dsync_acquire('$lease', 'new2', '5 s', '30 s')::text, 'NULL'), "
		  . "clock_timestamp() >= '$old_expiry'::timestamptz");
	like($token, qr/^\d+$/, "$what: a blocking durable acquire is granted");
	is($not_before, 't', "$what: ... but not before the ephemeral lease's expiry");
	return;
}

my $node = dsync_node('primary', @conf);
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', 'CREATE EXTENSION dsync');

# 1 and 2: a fast restart.
my $expiry = hold_ephemeral($node, 'r', 'old', 5);
$node->restart(mode => 'fast');
my $other = q1($node,
	"SELECT coalesce(dsync_acquire('o', 'x', '5 s', '0')::text, 'NULL')", 'other');
like($other, qr/^\d+$/,
	'a database that never used ephemeral leases grants durably at once after the restart');
durable_after_start($node, 'fast restart', 'r', $expiry);

# 3: a promotion.  The standby replays the record (a setval in WAL).
$node->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($node, 'b', has_streaming => 1);
$standby->start;
stop_at_end($standby);
$node->safe_psql('postgres', q{SELECT dsync_release('r', 'new2')});
$expiry = hold_ephemeral($node, 'p', 'old', 5);
$node->wait_for_catchup($standby);
$node->stop('immediate');
$standby->promote;
durable_after_start($standby, 'promotion', 'p', $expiry);

done_testing();
