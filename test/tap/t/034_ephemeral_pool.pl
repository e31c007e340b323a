# Ephemeral leases at scale (issue 33): their names, holders and info live
# in a shared pool of chunks (src/leases/ephpool.c), not inline in the
# entries.
#   1. By default a server keeps 100,000 ephemeral leases, all held at
#      once, in no more than 32 MB of shared memory (the difference with a
#      server that has them off); the 100,001st is "too many".
#   2. A small pool runs dry: a grant whose strings do not fit fails with
#      SQLSTATE 53400 and a hint, and so does a reentrant grant that would
#      need more room for its info (which keeps its old info), while one
#      whose strings fit in the chunks it has is granted; releases
#      give the chunks back, and 10 times the pool's chunks go through it
#      with every grant still working.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib '.';
use DsyncTest;

my $max_ttl = 10;    # dsync.ephemeral_max_ttl, seconds: the grace after a start
my @conf = ("dsync.ephemeral_max_ttl = $max_ttl");

# Shared memory the whole server allocated (named and anonymous).
my $shmem_sql = 'SELECT sum(allocated_size) FROM pg_shmem_allocations';

# Run $sql, expecting an error; its verbose message.
sub error_of
{
	my ($node, $sql) = @_;
	my ($ret, $stdout, $stderr) = $node->psql('postgres', "\\set VERBOSITY verbose\n$sql");
	return $stderr;
}

# =========================================================================
# 1. 100,000 by default, in at most 32 MB
# =========================================================================

my $off = dsync_node('off', @conf, 'dsync.ephemeral_max_leases = 0');
my $shmem_off = q1($off, $shmem_sql);
$off->stop;

my $node = dsync_node('def', @conf);
is(q1($node, 'SHOW dsync.ephemeral_max_leases'), '100000',
	'default: dsync.ephemeral_max_leases is 100000');
my $shmem_def = q1($node, $shmem_sql);
my $cost = $shmem_def - $shmem_off;
note("shared memory for 100,000 ephemeral leases: $cost bytes");
cmp_ok($cost, '<=', 32 * 1024 * 1024, 'default: ephemeral leases take at most 32 MB of shared memory');
cmp_ok($cost, '>', 0, 'default: and some');

# After the grace, 100,000 leases at once, in one statement.
like(
	q1($node,
		"SELECT dsync_acquire('open', 'o', '1 s', '"
		  . (3 * $max_ttl)
		  . " s', NULL, durable => false)"),
	qr/^\d+$/,
	'default: ephemeral grants open after the grace');
q1($node, "SELECT dsync_release('open', 'o')");
is( q1($node,
		"SELECT count(dsync_acquire('held-' || i, 'h', '$max_ttl s', '0', NULL, false)) "
		  . 'FROM generate_series(1, 100000) i'),
	'100000',
	'default: 100,000 ephemeral leases granted');
like(
	error_of($node,
		"SELECT dsync_renew('held-1', 'h') IS NOT NULL AND dsync_renew('held-100000', 'h') IS NOT NULL;\n"
		  . "SELECT dsync_acquire('one-more', 'h', '1 s', '0', NULL, false);"),
	qr/ERROR:\s+53200:\s+too many ephemeral leases/,
	'default: the 100,001st is "too many ephemeral leases" (53200)');
is( q1($node,
		"SELECT count(*) FILTER (WHERE dsync_release('held-' || i, 'h')) FROM generate_series(1, 100000) i"),
	'100000',
	'default: all 100,000 released');
like(q1($node, "SELECT dsync_acquire('one-more', 'h', '1 s', '0', NULL, false)"),
	qr/^\d+$/, 'default: a grant works after the releases');
$node->stop;

# =========================================================================
# 2. A small pool runs dry, and its chunks come back
# =========================================================================

# 100 leases: a pool of 250 chunks of 60 bytes.  A name and a holder of
# 255 bytes each take 9 chunks: 27 such leases fit, not 28.
my $small = dsync_node('small', @conf, 'dsync.ephemeral_max_leases = 100');
q1($small,
	"CREATE FUNCTION long_name(i int) RETURNS text LANGUAGE sql AS \$\$ SELECT lpad(i::text, 255, 'n') \$\$");
my $holder = 'h' x 255;
like(
	q1($small,
		"SELECT dsync_acquire('open', 'o', '1 s', '"
		  . (3 * $max_ttl)
		  . " s', NULL, durable => false)"),
	qr/^\d+$/,
	'small: ephemeral grants open after the grace');
q1($small, "SELECT dsync_release('open', 'o')");
is( q1($small,
		"SELECT count(dsync_acquire(long_name(i), '$holder', '$max_ttl s', '0', NULL, false)) "
		  . 'FROM generate_series(1, 27) i'),
	'27',
	'small: 27 leases with 255-byte names and holders fit');
my $err = error_of($small,
	"SELECT dsync_acquire(long_name(28), '$holder', '$max_ttl s', '0', NULL, false);");
like($err, qr/ERROR:\s+53400:\s+no room left for the names, holders and info of ephemeral leases/,
	'small: the 28th fails with SQLSTATE 53400');
like($err, qr/HINT:\s+Raise dsync.ephemeral_max_leases/, 'small: with a hint');
is(q1($small, "SELECT count(*) FROM dsync_leases"), '27', 'small: the 27 are still held');

# A short name still fits in what is left (250 - 243 = 7 chunks).
like(q1($small, "SELECT dsync_acquire('s', 'h', '$max_ttl s', '0', '{\"a\": 1}', false)"),
	qr/^\d+$/, 'small: a short lease fits in the chunks left');
# Info that needs more chunks than are left: refused, the old info stays.
$err = error_of($small,
	"SELECT dsync_acquire('s', 'h', '$max_ttl s', '0', jsonb_build_object('pad', repeat('x', 900)), false);");
like($err, qr/ERROR:\s+53400:/, 'small: a reentrant grant with too much info fails with 53400');
is(q1($small, "SELECT info FROM dsync_leases WHERE lease = 's'"),
	'{"a": 1}', 'small: and the lease keeps its info');
# With the pool run dry, a reentrant grant whose strings fit in the chunks
# its lease has already is not refused.
is( q1($small,
		"DO \$\$ BEGIN FOR i IN 1..20 LOOP BEGIN "
		  . "PERFORM dsync_acquire('p' || i, 'h', '$max_ttl s', '0', NULL, false); "
		  . "EXCEPTION WHEN configuration_limit_exceeded THEN EXIT; END; END LOOP; END \$\$; "
		  . "SELECT count(*) > 0 FROM dsync_leases WHERE lease LIKE 'p%'"),
	't', 'small: short leases take what is left of the pool');
like(error_of($small, "SELECT dsync_acquire('q', 'h', '$max_ttl s', '0', NULL, false);"),
	qr/ERROR:\s+53400:/, 'small: the pool is dry');
like( q1($small,
		"SELECT dsync_acquire(long_name(1), '$holder', '$max_ttl s', '0', '{}', false)"),
	qr/^\d+$/, 'small: a reentrant grant with info that fits in its own chunks is granted');
is(q1($small, "SELECT info FROM dsync_leases WHERE lease = long_name(1)"),
	'{}', 'small: with its new info');
my $short = q1($small, "SELECT count(*) FROM dsync_leases WHERE lease LIKE 'p%'");
is( q1($small,
		"SELECT count(*) FILTER (WHERE dsync_release(lease, 'h')) FROM dsync_leases WHERE lease LIKE 'p%'"),
	$short, "small: the $short short leases released");

# Releases give the chunks back: 10 times the pool goes through it.
is( q1($small,
		"SELECT count(*) FILTER (WHERE dsync_release(long_name(i), '$holder')) FROM generate_series(1, 27) i"),
	'27',
	'small: the 27 released');
q1($small, "SELECT dsync_release('s', 'h')");
is( q1($small,
		"SELECT count(*) FILTER (WHERE dsync_acquire(long_name(i % 27 + 1), '$holder', '$max_ttl s', '0', NULL, false) IS NOT NULL "
		  . "AND dsync_release(long_name(i % 27 + 1), '$holder')) FROM generate_series(1, 280) i"),
	'280',
	'small: 280 grants and releases of 9 chunks each (10 pools) all work');
is( q1($small,
		"SELECT count(dsync_acquire(long_name(i), '$holder', '$max_ttl s', '0', NULL, false)) "
		  . 'FROM generate_series(1, 27) i'),
	'27',
	'small: afterwards 27 fit again: no chunk was lost');
like(
	error_of($small, "SELECT dsync_acquire(long_name(28), '$holder', '$max_ttl s', '0', NULL, false);"),
	qr/ERROR:\s+53400:/,
	'small: and the 28th still does not');
$small->stop;

done_testing();
