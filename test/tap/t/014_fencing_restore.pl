# Fencing tokens stay above every token issued before when an older state
# of the database comes back.
#
# The sequence behind the tokens goes back with the database: pg_restore
# --clean of an older dump put it at its dump-time value, and the next
# grant got a token already handed out (3073 after 6002 had been issued).
# The same happens after point-in-time recovery to an earlier moment, or
# failover to an asynchronous standby that had not received the latest
# blocks.  Each block of tokens now starts at no less than the server
# clock in microseconds (fencing.c), so it starts above every token issued
# before, whatever the sequence says.  This test proves it for:
#   - pg_dump, more grants, pg_restore --clean of the older dump;
#   - a base backup, more grants, a new server started from the older
#     backup (what PITR to an earlier point and an asynchronous standby
#     that lags both look like);
#   - and that tokens still rise across plain restarts and crashes.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib '.';
use DsyncTest;

my $node = dsync_node('fence');
my $dir = PostgreSQL::Test::Utils::tempdir('fence');

# Grant and release $n times; the largest token.
sub grants
{
	my ($n, $target) = @_;
	return q1($target // $node,
		"SELECT max(t) FROM (SELECT dsync_acquire('f', 'h' || i, '1 minute') AS t,"
		  . " dsync_release('f', 'h' || i) FROM generate_series(1, $n) i) s");
}

my $first = grants(10);
like($first, qr/^\d+$/, 'tokens are issued');

# --- pg_dump, more grants, pg_restore --clean of the older dump ------------------

$node->command_ok(
	[ 'pg_dump', '-Fc', '-f', "$dir/old.dump", '-d', $node->connstr('postgres') ],
	'pg_dump of the database');
my $issued = grants(3000);
cmp_ok($issued, '>', $first, '3,000 more grants after the dump');
$node->command_ok(
	[ 'pg_restore', '--clean', '--if-exists', '-d', $node->connstr('postgres'), "$dir/old.dump" ],
	'pg_restore --clean of the older dump');
my $after_restore = grants(1);
cmp_ok($after_restore, '>', $issued,
	'after restoring the older dump, the next token is above every token issued before');

# --- a server started from an older base backup -------------------------------

$node->backup('older');
my $issued_later = grants(3000);
cmp_ok($issued_later, '>', $after_restore, '3,000 more grants after the backup');
$node->stop('fast');
my $old = PostgreSQL::Test::Cluster->new('from_backup');
$old->init_from_backup($node, 'older');
$old->start;
my $from_backup = grants(1, $old);
cmp_ok($from_backup, '>', $issued_later,
	'a server started from the older backup issues tokens above every token issued before');
$old->stop('fast');

# --- restarts and crashes ---------------------------------------------------------

$node->start;
my $before = grants(5);
$node->restart;
my $restarted = grants(1);
cmp_ok($restarted, '>', $before, 'tokens rise across a restart');
$node->stop('immediate');
$node->start;
cmp_ok(grants(1), '>', $restarted, 'tokens rise across a crash');

done_testing();
