# Privileges and lease ownership, with real logins (not SET ROLE).
#
# API.md, "Errors and security": the role that acquired a lease owns it;
# renew, release and assert_held from a role that is not a member of the
# owner role fail as "not held", even with the right holder string.
# Ordinary roles cannot write the extension's tables directly; all changes
# go through the functions, which are safe against search_path tricks.
# dsync_force_release is for administrators only (not granted to PUBLIC).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('security');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'dsync'\n");
$node->start;
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION dsync;
CREATE ROLE alice LOGIN;
CREATE ROLE bob LOGIN;
CREATE ROLE carol LOGIN;
GRANT alice TO carol;
CREATE ROLE dave LOGIN;
GRANT EXECUTE ON FUNCTION dsync_force_release(text, text) TO dave;
CREATE SCHEMA bobs AUTHORIZATION bob;
});

# Run SQL as a role over its own login; returns (exit code, stdout, stderr)
# with verbose errors so that SQLSTATEs show in stderr.
sub run_as
{
	my ($role, $sql) = @_;
	my ($ret, $stdout, $stderr) = $node->psql(
		'postgres',
		"\\set VERBOSITY verbose\n$sql",
		connstr => $node->connstr('postgres') . " user=$role");
	return ($ret, $stdout, $stderr);
}

# SQL as a role that must succeed; returns stdout.
sub ok_as
{
	my ($role, $sql, $name) = @_;
	my ($ret, $stdout, $stderr) = run_as($role, $sql);
	is($ret, 0, "$name: runs without error") or diag($stderr);
	return $stdout;
}

# SQL as a role that must fail with the given SQLSTATE.
sub fails_as
{
	my ($role, $sql, $sqlstate, $name) = @_;
	my ($ret, $stdout, $stderr) = run_as($role, $sql);
	isnt($ret, 0, "$name: fails");
	like($stderr, qr/ERROR:\s+$sqlstate:/, "$name: SQLSTATE $sqlstate");
	return $stderr;
}

is(ok_as('alice', 'SELECT current_user', 'login as alice'),
	'alice', 'logged in as alice over a real connection');
is( ok_as(
		'alice',
		"SELECT rolsuper FROM pg_roles WHERE rolname = current_user",
		'alice is checked'),
	'f',
	'alice is an ordinary role');

# Direct access to the table and the sequence is refused.
my $s = fails_as('alice', 'SELECT * FROM dsync_lease', '42501',
	'SELECT from dsync_lease');
like($s, qr/permission denied for table dsync_lease/,
	'SELECT from dsync_lease: permission denied message');
fails_as('alice',
	"INSERT INTO dsync_lease (name, slot, holder, fencing, expires_at) VALUES ('forged', 0, 'alice', 1, now() + '1 hour')",
	'42501', 'INSERT into dsync_lease');
fails_as('alice', "UPDATE dsync_lease SET expires_at = now() + '1 year'",
	'42501', 'UPDATE dsync_lease');
fails_as('alice', 'DELETE FROM dsync_lease', '42501', 'DELETE FROM dsync_lease');
fails_as('alice', 'TRUNCATE dsync_lease', '42501', 'TRUNCATE dsync_lease');
$s = fails_as('alice', "SELECT nextval('dsync_fencing_seq')",
	'42501', 'nextval on dsync_fencing_seq');
like($s, qr/permission denied for sequence dsync_fencing_seq/,
	'nextval on dsync_fencing_seq: permission denied message');
fails_as('alice', "SELECT setval('dsync_fencing_seq', 1)",
	'42501', 'setval on dsync_fencing_seq');
fails_as('alice', 'SELECT * FROM dsync_fencing_seq',
	'42501', 'SELECT from dsync_fencing_seq');
fails_as('alice', 'ALTER SEQUENCE dsync_fencing_seq RESTART WITH 1',
	'42501', 'ALTER SEQUENCE dsync_fencing_seq');
$s = fails_as('alice', "SELECT dsync_force_release('anything')",
	'42501', 'dsync_force_release by an ordinary role');
like($s, qr/permission denied for function dsync_force_release/,
	'dsync_force_release: permission denied message');
fails_as('alice', "SELECT dsync_force_release('anything', 'someone')",
	'42501', 'dsync_force_release with a holder by an ordinary role');
is( $node->safe_psql(
		'postgres',
		"SELECT has_function_privilege('public', 'dsync_force_release(text, text)', 'EXECUTE')"
	),
	'f',
	'dsync_force_release is not executable by PUBLIC');

# Alice takes a lease; the view shows her as its owner.
my $token = ok_as('alice',
	"SELECT dsync_acquire('sec-lease', 'shared-holder', '1 hour')",
	'alice acquires sec-lease');
like($token, qr/^\d+$/, 'alice got a token');
my $expiry = $node->safe_psql('postgres',
	"SELECT expires_at FROM dsync_leases WHERE lease = 'sec-lease'");
is( ok_as(
		'bob',
		"SELECT holder || '|' || fencing || '|' || owner FROM dsync_leases WHERE lease = 'sec-lease'",
		'bob reads dsync_leases'),
	"shared-holder|$token|alice",
	'an ordinary role can read dsync_leases, which shows the owner');
is(ok_as('bob', "SELECT dsync_leader('sec-lease')", 'bob calls dsync_leader'),
	'shared-holder', 'dsync_leader works for another role');

# Bob uses the same holder string: everything says "not held".
is( ok_as(
		'bob', "SELECT dsync_renew('sec-lease', 'shared-holder', '2 hours') IS NULL",
		'bob renews alice\'s lease'),
	't',
	'renew by a non-member role returns NULL');
is( ok_as(
		'bob', "SELECT dsync_release('sec-lease', 'shared-holder')",
		'bob releases alice\'s lease'),
	'f',
	'release by a non-member role returns false');
$s = fails_as('bob', "SELECT dsync_assert_held('sec-lease', 'shared-holder')",
	'55000', 'assert_held by a non-member role');
like($s, qr/not held/, 'assert_held by a non-member role says "not held"');
is( ok_as(
		'bob',
		"SELECT dsync_acquire('sec-lease', 'shared-holder', '2 hours') IS NULL",
		'bob acquires with alice\'s holder string'),
	't',
	'acquire by a non-member role with the same holder string gets nothing');
is( $node->safe_psql(
		'postgres',
		"SELECT holder || '|' || fencing || '|' || owner || '|' || (expires_at = '$expiry') FROM dsync_leases WHERE lease = 'sec-lease'"
	),
	"shared-holder|$token|alice|true",
	'alice\'s lease is untouched by bob: same holder, token, owner and expiry');

# Carol is a member of alice: she may act on alice's lease.
my $renewed = ok_as('carol',
	"SELECT dsync_renew('sec-lease', 'shared-holder', '2 hours') > '$expiry'",
	'carol renews');
is($renewed, 't', 'renew by a member of the owner role extends the lease');
is( ok_as(
		'carol', "SELECT dsync_assert_held('sec-lease', 'shared-holder')",
		'carol asserts held'),
	$token,
	'assert_held by a member of the owner role returns the token');
is( ok_as(
		'carol', "SELECT dsync_acquire('sec-lease', 'shared-holder', '1 hour')",
		'carol re-acquires'),
	$token,
	'reentrant acquire by a member of the owner role keeps the token');
is( ok_as(
		'carol', "SELECT dsync_release('sec-lease', 'shared-holder')",
		'carol releases'),
	't',
	'release by a member of the owner role returns true');
is($node->safe_psql('postgres', "SELECT dsync_leader('sec-lease') IS NULL"),
	't', 'the lease is free after carol released it');

# Now bob can take it, with a newer token, and owns it.
my $bob_token = ok_as('bob',
	"SELECT dsync_acquire('sec-lease', 'shared-holder', '1 hour')",
	'bob acquires the free lease');
cmp_ok($bob_token, '>', $token, 'bob\'s token is above alice\'s');
is( $node->safe_psql(
		'postgres', "SELECT owner FROM dsync_leases WHERE lease = 'sec-lease'"),
	'bob', 'bob now owns the lease');
is( ok_as(
		'alice', "SELECT dsync_renew('sec-lease', 'shared-holder') IS NULL",
		'alice renews bob\'s lease'),
	't',
	'alice cannot renew bob\'s lease');

# dsync_force_release: superuser, or a role granted EXECUTE.
is( ok_as(
		'dave', "SELECT dsync_force_release('sec-lease')",
		'dave force-releases'),
	'1',
	'a role granted EXECUTE on dsync_force_release releases another role\'s lease');
is($node->safe_psql('postgres', "SELECT dsync_leader('sec-lease') IS NULL"),
	't', 'the lease is free after force_release');
ok_as('alice', "SELECT dsync_acquire('sec-lease', 'h2', '1 hour')",
	'alice acquires again');
is($node->safe_psql('postgres', "SELECT dsync_force_release('sec-lease', 'h2')"),
	'1', 'the superuser force-releases a named holder');

# search_path tricks: bob shadows the extension's objects in a schema of
# his own and puts it first; the functions must still use the real ones.
ok_as(
	'bob', q{
CREATE TABLE bobs.dsync_lease (
	name text, slot integer, holder text, fencing bigint,
	acquired_at timestamptz, renewed_at timestamptz, expires_at timestamptz,
	ttl interval, info jsonb, owner oid,
	PRIMARY KEY (name, slot));
CREATE SEQUENCE bobs.dsync_fencing_seq START 1;
}, 'bob creates shadow objects');
my $shadowed = ok_as(
	'bob', q{
SET search_path = bobs, public;
SELECT dsync_acquire('shadow-lease', 'bob-holder', '1 hour');
}, 'bob acquires with the shadow schema first in search_path');
like($shadowed, qr/^\d+$/, 'acquire with a hostile search_path returns a token');
cmp_ok($shadowed, '>', $bob_token,
	'the token comes from the real sequence, not the shadow one');
is( $node->safe_psql(
		'postgres',
		"SELECT holder || '|' || owner FROM public.dsync_leases WHERE lease = 'shadow-lease'"
	),
	'bob-holder|bob',
	'the lease was written to the real table');
is($node->safe_psql('postgres', 'SELECT count(*) FROM bobs.dsync_lease'),
	'0', 'the shadow table was not touched');
is( $node->safe_psql(
		'postgres', 'SELECT is_called FROM bobs.dsync_fencing_seq'),
	'f', 'the shadow sequence was not used');
is( ok_as(
		'bob', q{
SET search_path = bobs, public;
SELECT dsync_release('shadow-lease', 'bob-holder');
}, 'bob releases with the shadow schema first'),
	't',
	'release with a hostile search_path acts on the real table');

$node->stop;
done_testing();
