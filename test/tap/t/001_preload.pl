# dsync refuses to load unless it is in shared_preload_libraries, with an
# error and a HINT saying what to put in postgresql.conf; once preloaded,
# CREATE EXTENSION works at once, with no further restart.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('preload');
$node->init;
$node->start;

# Not preloaded: CREATE EXTENSION must fail, loudly and helpfully.
my ($ret, $stdout, $stderr) = $node->psql('postgres',
	"\\set VERBOSITY verbose\nCREATE EXTENSION dsync;");
isnt($ret, 0, 'CREATE EXTENSION dsync fails without shared_preload_libraries');
like(
	$stderr,
	qr/ERROR:\s+55000: dsync must be loaded via shared_preload_libraries/,
	'CREATE EXTENSION error says dsync must be preloaded (SQLSTATE 55000)');
like(
	$stderr,
	qr/HINT:.*shared_preload_libraries/,
	'CREATE EXTENSION error has a HINT naming shared_preload_libraries');
like(
	$stderr,
	qr/HINT:.*shared_preload_libraries\s*=\s*'dsync'/,
	'the HINT shows the exact setting to use');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_extension WHERE extname = 'dsync'"),
	'0', 'no extension was left behind by the failed CREATE EXTENSION');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_class WHERE relname IN ('dsync_lease', 'dsync_fencing_seq')"),
	'0', 'no dsync relations were left behind');

# LOAD fails the same way.
($ret, $stdout, $stderr) =
  $node->psql('postgres', "\\set VERBOSITY verbose\nLOAD 'dsync';");
isnt($ret, 0, "LOAD 'dsync' fails without shared_preload_libraries");
like(
	$stderr,
	qr/ERROR:\s+55000: dsync must be loaded via shared_preload_libraries/,
	"LOAD 'dsync' error says dsync must be preloaded");
like(
	$stderr,
	qr/HINT:.*shared_preload_libraries/,
	"LOAD 'dsync' error has a HINT naming shared_preload_libraries");

# A second attempt in the same session fails again (nothing was left
# half-loaded by the first).
($ret, $stdout, $stderr) = $node->psql('postgres',
	"LOAD 'dsync';\nLOAD 'dsync';\nSELECT 'still here';",
	on_error_stop => 0);
my @errors = ($stderr =~ /ERROR:\s+dsync must be loaded via shared_preload_libraries/g);
is(scalar(@errors), 2, "LOAD 'dsync' twice in one session fails both times");
is($stdout, 'still here', 'the session survives the refused loads');

# The server is unharmed: a later session still works.
is($node->safe_psql('postgres', 'SELECT 1'), '1',
	'server still serves queries after the refused loads');

# Preload it and restart once.
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'dsync'");
$node->restart;
is($node->safe_psql('postgres', 'SHOW shared_preload_libraries'),
	'dsync', 'dsync is now in shared_preload_libraries');

($ret, $stdout, $stderr) =
  $node->psql('postgres', 'CREATE EXTENSION dsync;');
is($ret, 0, 'CREATE EXTENSION dsync succeeds once preloaded');
is($stderr, '', 'CREATE EXTENSION dsync prints no error');

# No restart after CREATE EXTENSION: the functions work at once, in this
# session and in a new one.
my $token = $node->safe_psql('postgres',
	"SELECT dsync_acquire('preload-lease', 'holder-1', '1 minute')");
like($token, qr/^[0-9]+$/, 'dsync_acquire returns a token right after CREATE EXTENSION');
cmp_ok($token, '>', 0, 'the token is positive');
is($node->safe_psql('postgres', "SELECT dsync_leader('preload-lease')"),
	'holder-1', 'dsync_leader shows the holder');
is($node->safe_psql('postgres',
		"SELECT dsync_acquire('preload-lease', 'holder-1', '1 minute')"),
	$token, 'reentrant acquire returns the same token');
is($node->safe_psql('postgres',
		"SELECT dsync_acquire('preload-lease', 'holder-2', '1 minute') IS NULL"),
	't', 'another holder cannot take the held lease');

# CREATE EXTENSION in a second database also needs no restart.
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', 'CREATE EXTENSION dsync');
my $token2 = $node->safe_psql('other',
	"SELECT dsync_acquire('preload-lease', 'holder-2', '1 minute')");
like($token2, qr/^[0-9]+$/,
	'dsync_acquire works in a second database right after CREATE EXTENSION');

$node->stop;
done_testing();
