# More databases than dsync.max_databases (issue 11).
#
# Before 1.2, a restart with 11 connectable databases, dsync in the last
# three and dsync.max_databases = 8 left those three without a worker:
# expired rows stayed and nothing was announced, with a log line only.
# Now a slot only has to be found for each database that has the
# extension: the launcher looks at every database in turn, reusing the
# slots of those that turned out not to have it.  And where dsync truly
# cannot serve a database (every slot holds a database with the
# extension), CREATE EXTENSION and every transaction that changes a lease
# there get a WARNING, and dsync_databases shows the database unserved.
use strict;
use warnings;

use lib '.';
use DsyncTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# Four slots; postgres has dsync (dsync_node); eight plain databases first,
# then three with dsync: twelve connectable databases, four with dsync.
my $node = dsync_node('few', 'dsync.max_databases = 4');
$node->safe_psql('postgres', "CREATE DATABASE plain_$_") for 1 .. 8;
for my $db (qw(d1 d2 d3))
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION dsync');
}

# Leases that expire after the restart, in the last three databases.
$node->safe_psql($_, "SELECT dsync_acquire('pre', 'h', '6 seconds')") for qw(d1 d2 d3);
$node->restart;

# Nothing commits in d1..d3 after the restart: only the launcher's probing
# can find them.
my @listeners;
for my $db (qw(d1 d2 d3))
{
	my $l = Listener->new($node, $db);
	push @listeners, [ $db, $l, $l->listen('pre') ];
}
for my $x (@listeners)
{
	my ($db, $l, $ch) = @$x;
	my @n = grep { ($_->{json}{event} // '') eq 'expired' } $l->take($ch, 1, 60);
	is(scalar(@n), 1, "$db: the lease granted before the restart is announced as expired");
	ok(wait_for($node,
			"SELECT count(*) = 1 AND bool_and(holder IS NULL) FROM dsync_lease WHERE name = 'pre'",
			30, $db),
		"$db: its row is cleared");
	$l->quit;
}
is(q1($node,
		"SELECT string_agg(datname || ':' || state || ':' || served, ' ' ORDER BY datname) "
		  . "FROM dsync_databases WHERE datname IN ('postgres', 'd1', 'd2', 'd3')"),
	'd1:active:true d2:active:true d3:active:true postgres:active:true',
	'dsync_databases: the four databases with dsync are active and served');
ok(wait_for($node,
		"SELECT count(*) = 8 FROM dsync_databases WHERE datname LIKE 'plain\\_%' AND state IN ('absent', 'no slot') AND NOT served"),
	'the eight plain databases were looked at and are not served');
unlike(slurp_file($node->logfile), qr/dsync cannot look at every database/,
	'no warning in the server log: every database with dsync has a slot');

# --- a fifth database with dsync: truly no slot ------------------------------

$node->safe_psql('postgres', 'CREATE DATABASE d4');
my ($ret, $out, $err) = $node->psql('d4', 'CREATE EXTENSION dsync');
is($ret, 0, 'CREATE EXTENSION works in a fifth database');
like($err, qr/WARNING:  dsync cannot serve database "d4": all 4 database slots are in use/,
	'CREATE EXTENSION warns that dsync cannot serve the database');
like($err, qr/HINT:  Raise dsync.max_databases/, 'and says what to change');

($ret, $out, $err) = $node->psql('d4', "SELECT dsync_acquire('x', 'h', '1 second')");
is($ret, 0, 'acquire works there');
like($err, qr/WARNING:  dsync cannot serve database "d4"/,
	'the client that changes a lease there gets a WARNING');
like($err, qr/DETAIL:  This transaction's lease changes are committed but not announced/,
	'saying what is not happening');
is(q1($node, "SELECT state || ':' || served FROM dsync_databases WHERE datname = 'd4'", 'd4'),
	'no slot:false', 'dsync_databases shows d4 without a slot, not served');
is(q1($node, "SELECT served FROM dsync_stats", 'd4'), 'f', 'dsync_stats.served is false there');
like(slurp_file($node->logfile), qr/dsync cannot look at every database: all 4 database slots hold databases with the extension/,
	'the server log says so too');

# --- a slot comes free ------------------------------------------------------

$node->safe_psql('d3', 'DROP EXTENSION dsync');
($ret, $out, $err) = $node->psql('d4', "SELECT dsync_acquire('y', 'h', '1 second')");
is($err, '', 'once another database drops the extension, no warning');
ok(wait_for($node,
		"SELECT count(*) = 2 AND bool_and(holder IS NULL) FROM dsync_lease WHERE name IN ('x', 'y')",
		30, 'd4'),
	'd4 is served: its expired leases are cleared, also the one from before it had a slot');
is(q1($node, "SELECT state || ':' || served FROM dsync_databases WHERE datname = 'd4'", 'd4'),
	'active:true', 'dsync_databases shows d4 active and served');

$node->stop;
done_testing();
