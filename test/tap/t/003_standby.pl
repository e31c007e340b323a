# dsync on a streaming hot standby, and after promoting it.
#
# API.md: "On a hot standby, the read functions and views work; functions
# that change state fail with SQLSTATE 25006", and a fencing token is
# strictly greater than every token granted before it "across ...
# failover to a synchronous standby".
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf',
	"shared_preload_libraries = 'dsync'\n");
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION dsync');

my $max_primary = 0;

sub primary_acquire
{
	my ($lease, $holder, $ttl) = @_;
	my $t = $primary->safe_psql('postgres',
		"SELECT dsync_acquire('$lease', '$holder', '$ttl')");
	like($t, qr/^\d+$/, "primary grants $lease to $holder");
	$max_primary = $t if $t > $max_primary;
	return $t;
}

my $before_backup = primary_acquire('before-backup', 'p-holder', '1 hour');

$primary->backup('bkp');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'bkp', has_streaming => 1);
$standby->start;

# A lease granted after the backup reaches the standby only by streaming.
my $streamed = primary_acquire('streamed', 'leader-1', '1 hour');
my $long_name = 'x' x 100;
$primary->wait_for_catchup($standby);

is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'),
	't', 'standby is in recovery');

# Reads work on the standby and show the primary's leases.
is($standby->safe_psql('postgres', "SELECT dsync_leader('streamed')"),
	'leader-1', 'dsync_leader on the standby shows the streamed lease');
is($standby->safe_psql('postgres', "SELECT dsync_leader('before-backup')"),
	'p-holder', 'dsync_leader on the standby shows the lease from the backup');
is($standby->safe_psql('postgres', "SELECT dsync_leader('nobody-holds-this') IS NULL"),
	't', 'dsync_leader on the standby is NULL for a free lease');
is( $standby->safe_psql(
		'postgres',
		"SELECT lease || '|' || holder || '|' || fencing || '|' || owner FROM dsync_leases ORDER BY lease"
	),
	"before-backup|p-holder|$before_backup|"
	  . $primary->safe_psql('postgres', 'SELECT current_user')
	  . "\nstreamed|leader-1|$streamed|"
	  . $primary->safe_psql('postgres', 'SELECT current_user'),
	'dsync_leases on the standby shows the primary\'s leases with their tokens');
is($standby->safe_psql('postgres', "SELECT dsync_channel('streamed')"),
	'dsync:streamed', 'dsync_channel works on the standby');
is( $standby->safe_psql('postgres', "SELECT dsync_channel('$long_name')"),
	$primary->safe_psql('postgres', "SELECT dsync_channel('$long_name')"),
	'dsync_channel of a long name is the same on standby and primary');

# A release on the primary is seen on the standby too.
primary_acquire('short-lived', 'p2', '1 hour');
is($primary->safe_psql('postgres', "SELECT dsync_release('short-lived', 'p2')"),
	't', 'primary releases short-lived');
# A release commits without waiting for its WAL to be written (lazycommit.c),
# so the primary's write position may not include it yet: wait for the
# standby to show it instead (the WAL writer writes it within
# wal_writer_delay).
ok($standby->poll_query_until('postgres', "SELECT dsync_leader('short-lived') IS NULL"),
	'standby sees the release');

# Every state-changing function fails with SQLSTATE 25006 on the standby.
my %writes = (
	'dsync_acquire' => "SELECT dsync_acquire('standby-lease', 's-holder', '1 minute')",
	'dsync_acquire (reentrant)' => "SELECT dsync_acquire('streamed', 'leader-1', '1 hour')",
	'dsync_renew'       => "SELECT dsync_renew('streamed', 'leader-1')",
	'dsync_release'     => "SELECT dsync_release('streamed', 'leader-1')",
	'dsync_assert_held' => "SELECT dsync_assert_held('streamed', 'leader-1')",
	'dsync_force_release' => "SELECT dsync_force_release('streamed')",);
for my $what (sort keys %writes)
{
	my ($ret, $stdout, $stderr) = $standby->psql('postgres',
		"\\set VERBOSITY verbose\n$writes{$what};");
	isnt($ret, 0, "$what fails on the standby");
	like($stderr, qr/ERROR:\s+25006:/, "$what fails with SQLSTATE 25006 on the standby");
	is($stdout, '', "$what returns nothing on the standby");

}

# The same, caught in a DO block (read-only, so it runs on a standby).
for my $what (sort keys %writes)
{
	my ($ret, $stdout, $stderr) = $standby->psql(
		'postgres', qq{
DO \$\$
BEGIN
	PERFORM ($writes{$what});
	RAISE NOTICE 'no error';
EXCEPTION WHEN OTHERS THEN
	RAISE NOTICE 'sqlstate=%', SQLSTATE;
END
\$\$;
});
	is($ret, 0, "$what inside a DO block on the standby: block runs");
	like($stderr, qr/NOTICE:\s+sqlstate=25006/,
		"$what inside a DO block on the standby: caught SQLSTATE 25006");
}

# Nothing changed: the standby still shows the same lease state.
$primary->wait_for_catchup($standby);
is( $standby->safe_psql(
		'postgres', "SELECT holder || '|' || fencing FROM dsync_leases WHERE lease = 'streamed'"),
	"leader-1|$streamed",
	'lease unchanged on the standby after the refused calls');
is($primary->safe_psql('postgres', "SELECT dsync_leader('standby-lease') IS NULL"),
	't', 'the refused acquire on the standby granted nothing on the primary');

# On the primary, a read-only transaction is refused the same way.
{
	my ($ret, $stdout, $stderr) = $primary->psql('postgres',
		"\\set VERBOSITY verbose\nSET default_transaction_read_only = on;\n"
		  . "SELECT dsync_acquire('ro-lease', 'ro-holder', '1 minute');");
	isnt($ret, 0, 'dsync_acquire fails in a read-only transaction on the primary');
	like($stderr, qr/ERROR:\s+25006:/,
		'dsync_acquire in a read-only transaction: SQLSTATE 25006');
	($ret, $stdout, $stderr) = $primary->psql('postgres',
		"\\set VERBOSITY verbose\nBEGIN READ ONLY;\n"
		  . "SELECT dsync_release('streamed', 'leader-1');");
	like($stderr, qr/ERROR:\s+25006:/,
		'dsync_release in a read-only transaction: SQLSTATE 25006');
	is($primary->safe_psql('postgres', "SELECT dsync_leader('streamed')"),
		'leader-1', 'the lease is still held after the refused release');
}

# Make the standby synchronous and keep granting on the primary, then
# fail over without waiting for replay: every token a client of the old
# primary saw must be below every token the new primary gives.
$primary->append_conf('postgresql.conf',
	"synchronous_standby_names = 'standby'\nsynchronous_commit = on\n");
$primary->reload;
$primary->poll_query_until('postgres',
	"SELECT sync_state = 'sync' FROM pg_stat_replication WHERE application_name = 'standby'"
) or die 'standby did not become synchronous';
is( $primary->safe_psql(
		'postgres',
		"SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby'"),
	'sync', 'standby is now a synchronous standby');

my $sql = '';
for my $i (1 .. 200)
{
	$sql .= "SELECT dsync_acquire('churn-' || ($i % 5), 'churner', '1 hour');\n";
	$sql .= "SELECT dsync_release('churn-' || ($i % 5), 'churner')::int;\n";
}
my @out = split /\n/, $primary->safe_psql('postgres', $sql);
my @tokens = @out[ grep { $_ % 2 == 0 } 0 .. $#out ];
is(scalar(@tokens), 200, 'primary granted 200 churn leases');
for (@tokens) { $max_primary = $_ if $_ > $max_primary; }
my $last_lease = primary_acquire('failover-lease', 'old-leader', '1 hour');

$primary->stop('immediate');
$standby->promote;
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'),
	'f', 'standby promoted');

# The synchronously committed lease survived the failover.
is($standby->safe_psql('postgres', "SELECT dsync_leader('failover-lease')"),
	'old-leader', 'lease granted on the old primary is held after failover');
is( $standby->safe_psql(
		'postgres',
		"SELECT dsync_acquire('failover-lease', 'old-leader', '1 hour')"),
	$last_lease,
	'reentrant acquire on the new primary returns the same token');
is( $standby->safe_psql(
		'postgres',
		"SELECT dsync_acquire('failover-lease', 'usurper', '1 hour') IS NULL"),
	't', 'another holder cannot take it on the new primary');

# New grants on the promoted standby beat every token of the old primary.
my $new = $standby->safe_psql('postgres',
	"SELECT dsync_acquire('after-promotion', 'new-leader', '1 hour')");
like($new, qr/^\d+$/, 'dsync_acquire works on the promoted standby');
cmp_ok($new, '>', $max_primary,
	"token on the promoted standby ($new) is above every token of the old primary ($max_primary)"
);
is($standby->safe_psql('postgres', "SELECT dsync_renew('after-promotion', 'new-leader') IS NOT NULL"),
	't', 'dsync_renew works on the promoted standby');
is($standby->safe_psql('postgres', "SELECT dsync_assert_held('after-promotion', 'new-leader')"),
	$new, 'dsync_assert_held works on the promoted standby');
is($standby->safe_psql('postgres', "SELECT dsync_release('after-promotion', 'new-leader')"),
	't', 'dsync_release works on the promoted standby');
is($standby->safe_psql('postgres', "SELECT dsync_force_release('streamed')"),
	'1', 'dsync_force_release works on the promoted standby');

$standby->stop;
done_testing();
