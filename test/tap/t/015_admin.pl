# What administrators, superusers and hostile neighbours do to dsync's
# objects, and what dsync does about it.
#
#   - Look-alike tables: a role with CREATE on the extension's schema made
#     a dsync_semaphore in a 1.0 installation (which has none) with 3
#     permits, and a plain lock then had 3 holders.  dsync now uses only
#     relations that belong to the extension.
#   - Damaged rows: a superuser (or sqlsmith) writing the tables directly
#     left a NULL ttl, and dsync_renew crashed the backend.  Every row is
#     checked as it is read: the calls that meet it get an error (XX001),
#     the view and the reaper skip it with a warning, nothing crashes.
#   - A table altered behind the extension's back is refused.
#   - DROP ROLE of a role that holds leases fails (2BP01), as for any
#     object that depends on a role; REASSIGN OWNED BY gives them to
#     another role, DROP OWNED BY releases them (with events).
#   - ALTER EXTENSION dsync UPDATE from 1.0 and from 1.1 (with a semaphore
#     whose permits 1.1 kept in dsync_lease) keeps every holder.
#   - The update from 1.4 adds dsync_semaphores, which every role reads:
#     the definitions 1.4 made, their creators' names, and a creator
#     dropped from another database as "unknown (OID=n)".
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib '.';
use DsyncTest;

my $node = dsync_node('admin');

sub psql_err
{
	my ($sql, $user, $db) = @_;
	my ($ret, $out, $err) = $node->psql($db // 'postgres', "\\set VERBOSITY verbose\n$sql",
		extra_params => [ $user ? ('-U', $user) : () ]);
	return ($ret, $out, $err);
}

# --- look-alike tables in a 1.0 installation ------------------------------------

$node->safe_psql('postgres', q{
	CREATE DATABASE lookalike;
	CREATE ROLE mallory LOGIN;
});
$node->safe_psql('lookalike', q{
	CREATE EXTENSION dsync VERSION '1.0';
	GRANT CREATE ON SCHEMA public TO mallory;
});
$node->safe_psql('lookalike', q{
	CREATE TABLE public.dsync_semaphore (name text COLLATE "C" NOT NULL PRIMARY KEY,
		permits integer NOT NULL, created_at timestamptz NOT NULL, owner oid NOT NULL);
	INSERT INTO public.dsync_semaphore VALUES ('door', 3, now(), 10);
}, extra_params => [ '-U', 'mallory' ]);
is($node->safe_psql('lookalike',
		"SELECT count(dsync_acquire('door', 'h' || i)) FROM generate_series(1, 3) i"),
	'1', 'a look-alike dsync_semaphore is ignored: a plain lock has one holder');
is($node->safe_psql('lookalike', "SELECT dsync_leader('door')"), 'h1',
	'and a leader');
$node->safe_psql('lookalike', "SELECT dsync_release('door', 'h1')");

# --- damaged rows ------------------------------------------------------------------

my $reaper = reaper_pid($node);
q1($node, "SELECT dsync_acquire('dmg', 'h', '1 hour'), dsync_acquire('fine', 'h', '1 hour')");
q1($node, "UPDATE dsync_lease SET ttl = NULL WHERE name = 'dmg'");
my ($ret, $out, $err) = psql_err("SELECT dsync_renew('dmg', 'h')");
like($err, qr/ERROR:\s+XX001: row \(\d+,\d+\) of dsync table "dsync_lease" is damaged: ttl is null/,
	'dsync_renew of a row with a NULL ttl is an error (XX001), not a crash');
for my $call ("dsync_acquire('dmg', 'x')", "dsync_release('dmg', 'h')",
	"dsync_assert_held('dmg', 'h')", "dsync_leader('dmg')", "dsync_force_release('dmg')")
{
	($ret, $out, $err) = psql_err("SELECT $call");
	like($err, qr/XX001/, "$call on the damaged row: XX001");
}
is(q1($node, "SELECT 1"), '1', 'the server is still up');
($ret, $out, $err) = psql_err("SELECT lease FROM dsync_leases ORDER BY 1");
is($out, 'fine', 'the view skips the damaged row');
like($err, qr/WARNING:\s+XX001: .*damaged: ttl is null/, 'with a warning');
for my $damage ("holder = ''", "fencing = NULL", "expires_at = NULL", "expires_at = 'infinity'",
	"owner = NULL", "acquired_at = NULL", "ttl = '-1 second'")
{
	q1($node, "UPDATE dsync_lease SET ttl = '1 hour', holder = 'h', fencing = 1, "
		  . "expires_at = now() + '1 hour', owner = 10, acquired_at = now(), slot = 0 "
		  . "WHERE name = 'dmg'");
	q1($node, "UPDATE dsync_lease SET $damage WHERE name = 'dmg'");
	($ret, $out, $err) = psql_err("SELECT dsync_renew('dmg', 'h')");
	like($err, qr/XX001: .*is damaged/, "renew with $damage: XX001");
}
q1($node, "SELECT dsync_join('grp', 'm', '1 hour')");
q1($node, "ALTER TABLE dsync_member ALTER COLUMN ttl DROP NOT NULL");
q1($node, "UPDATE dsync_member SET ttl = NULL");
($ret, $out, $err) = psql_err("SELECT dsync_join('grp', 'm')");
like($err, qr/XX001: row .* of dsync table "dsync_member" is damaged: ttl is null/,
	'a damaged membership is an error too');
q1($node, "DELETE FROM dsync_member");
q1($node, "ALTER TABLE dsync_member ALTER COLUMN ttl SET NOT NULL");
q1($node, "UPDATE dsync_lease SET expires_at = now() - interval '1 second' WHERE name = 'fine'");
q1($node, "SELECT dsync_acquire('short', 'h', '200 ms')");
ok(wait_for($node, "SELECT count(*) = 0 FROM dsync_lease WHERE name = 'short' AND holder IS NOT NULL"),
	'the reaper goes on clearing leases');
is(q1($node, "SELECT pid FROM pg_stat_activity WHERE backend_type = 'dsync reaper' AND datname = 'postgres'"),
	$reaper, 'the reaper never died on the damaged row');
q1($node, "DELETE FROM dsync_lease WHERE name = 'dmg'");

# --- a table altered behind the extension's back ----------------------------------

q1($node, "CREATE INDEX dsync_lease_holder_idx ON dsync_lease (holder)");
($ret, $out, $err) = psql_err("SELECT dsync_acquire('altered', 'w1')");
like($err, qr/ERROR:\s+55000: dsync table "dsync_lease" has been altered/,
	'a lease table with an added index is refused (55000)');
q1($node, "DROP INDEX dsync_lease_holder_idx");
like(q1($node, "SELECT dsync_acquire('altered', 'w1')"), qr/^\d+$/, 'and works once it is removed');

# --- DROP ROLE, REASSIGN OWNED, DROP OWNED ------------------------------------------

$node->safe_psql('postgres', q{
	CREATE ROLE r1 LOGIN;
	CREATE ROLE r2 LOGIN;
	CREATE ROLE r3 LOGIN;
	CREATE DATABASE nodsync;
});
$node->safe_psql('postgres', q{
	SELECT dsync_acquire('r1-lease', 'h1', '1 hour');
	SELECT dsync_join('r1-group', 'm1', '1 hour');
	SELECT dsync_event_set('r1-signal');
	SELECT dsync_semaphore_create('r1-sem', 2);
	SELECT dsync_acquire('r1-sem', 'p1', '1 hour');
	SELECT dsync_fence('r1-fence', 10);
}, extra_params => [ '-U', 'r1' ]);
($ret, $out, $err) = psql_err('DROP ROLE r1');
like($err, qr/ERROR:\s+2BP01: role "r1" cannot be dropped because it owns dsync leases or other dsync state/,
	'DROP ROLE of a role that holds leases fails (2BP01)');
like($err, qr/DETAIL:\s+In database "postgres": 2 leases or permits, 1 membership, 1 pending signal, 1 semaphore definition, 1 fence\./,
	'and says what it owns (singular for one)');
q1($node, 'REASSIGN OWNED BY r1 TO r2');
is(q1($node, "SELECT string_agg(DISTINCT owner, ',') FROM dsync_leases WHERE lease LIKE 'r1-%'"),
	'r2', 'REASSIGN OWNED BY gives the leases to the new role');
is(q1($node, "SELECT owner FROM dsync_fences WHERE resource = 'r1-fence'"), 'r2',
	'and the fences');
is($node->safe_psql('postgres', "SELECT dsync_renew('r1-lease', 'h1') IS NOT NULL",
		extra_params => [ '-U', 'r2' ]),
	't', 'which can renew them');
is($node->safe_psql('postgres', "SELECT dsync_event_wait('r1-signal', '0')",
		extra_params => [ '-U', 'r2' ]),
	't', 'and consume the signal');
($ret, $out, $err) = psql_err('DROP ROLE r1');
is($ret, 0, 'DROP ROLE succeeds once nothing is owned') or diag($err);

$node->safe_psql('postgres', "SELECT dsync_acquire('r3-lease', 'h3', '1 hour'), dsync_join('r3-group', 'm3'), dsync_fence('r3-fence', 20)",
	extra_params => [ '-U', 'r3' ]);
my $listener = Listener->new($node);
my $ch = $listener->listen('r3-lease');
q1($node, 'DROP OWNED BY r3');
my ($rel) = $listener->take($ch, 1);
is($rel->{json}{event} // '', 'released', 'DROP OWNED BY releases the role\'s leases, with an event');
is(q1($node, "SELECT count(*) FROM dsync_leases WHERE lease = 'r3-lease'")
	  . q1($node, "SELECT count(*) FROM dsync_members('r3-group')"),
	'00', 'and ends its memberships');
is(q1($node, "SELECT token || ' ' || (owner = (SELECT rolname FROM pg_roles WHERE oid = 10)) FROM dsync_fences WHERE resource = 'r3-fence'"),
	'20 true', 'but keeps its fences\' marks, given to the bootstrap superuser');
($ret, $out, $err) = psql_err('DROP ROLE r3');
is($ret, 0, 'DROP ROLE then succeeds') or diag($err);
$listener->quit;

# --- updates from 1.0 and 1.1 keep every holder --------------------------------

$node->safe_psql('postgres', 'CREATE DATABASE from10; CREATE DATABASE from11;');
$node->safe_psql('from10', q{
	CREATE EXTENSION dsync VERSION '1.0';
	SELECT dsync_acquire('old', 'h', '1 hour');
});
my $old_token = $node->safe_psql('from10', "SELECT fencing FROM dsync_leases WHERE lease = 'old'");
$node->safe_psql('from10', 'ALTER EXTENSION dsync UPDATE');
is($node->safe_psql('from10', "SELECT extversion FROM pg_extension WHERE extname = 'dsync'"),
	'1.5', '1.0 updates to 1.5');
is($node->safe_psql('from10', "SELECT dsync_acquire('old', 'h', '1 hour')"), $old_token,
	'a lease taken under 1.0 is still held, with its token');
like($node->safe_psql('from10', "SELECT dsync_semaphore_create('s', 2)::text || count(*) FROM dsync_stats"),
	qr/^true1$/, 'the functions of 1.1 and 1.2 work after the update');

# What 1.1 left: a 3-permit semaphore whose holders are rows of dsync_lease
# in slots 0 and 2 (slot 1 was released and reaped), and a plain lease.
# (This library runs semaphores only on 1.2's tables, so the state is
# written as 1.1 wrote it.)
$node->safe_psql('from11', q{
	CREATE EXTENSION dsync VERSION '1.1';
	SELECT dsync_acquire('plain', 'p', '1 hour');
	INSERT INTO dsync_semaphore VALUES ('sem', 3, now(), 10);
	INSERT INTO dsync_lease SELECT 'sem', slot, holder, 1000 + slot, now(), now(),
		now() + interval '1 hour', interval '1 hour', NULL, 10
	  FROM (VALUES (0, 'a'), (2, 'c')) AS v(slot, holder);
});
my %tok = split /\||\n/, $node->safe_psql('from11',
	"SELECT holder, fencing FROM dsync_leases WHERE lease = 'sem' ORDER BY 1");
$node->safe_psql('from11', 'ALTER EXTENSION dsync UPDATE');
is($node->safe_psql('from11', "SELECT count(*) FROM dsync_permit WHERE name = 'sem'"), '3',
	"1.1's permits of a 3-permit semaphore are 3 rows of dsync_permit after the update");
is($node->safe_psql('from11', "SELECT dsync_acquire('sem', 'a', '1 hour')"), $tok{a},
	'a holder from 1.1 keeps its permit and token');
is($node->safe_psql('from11', "SELECT dsync_renew('sem', 'c') IS NOT NULL"), 't',
	'another renews its permit');
like($node->safe_psql('from11', "SELECT dsync_acquire('sem', 'd', '1 hour')"), qr/^\d+$/,
	'the permit released under 1.1 is taken');
is($node->safe_psql('from11', "SELECT dsync_acquire('sem', 'e', '1 hour') IS NULL"), 't',
	'a fourth holder is refused');
is($node->safe_psql('from11', "SELECT dsync_leader('plain')"), 'p', 'a plain lease stays');

# --- the update from 1.3 adds fencing and the event log, keeping holders -----

$node->safe_psql('postgres', 'CREATE DATABASE from13');
$node->safe_psql('from13', q{
	CREATE EXTENSION dsync VERSION '1.3';
	SELECT dsync_acquire('kept', 'h', '1 hour');
});
my $kept_token = $node->safe_psql('from13', "SELECT fencing FROM dsync_leases WHERE lease = 'kept'");
isnt(scalar $node->psql('from13', "SELECT dsync_fence('r', 1)", stderr => \my $fence_err), 0,
	'dsync_fence does not exist before the update');
$node->safe_psql('from13', 'ALTER EXTENSION dsync UPDATE');
is($node->safe_psql('from13', "SELECT extversion FROM pg_extension WHERE extname = 'dsync'"),
	'1.5', '1.3 updates to 1.5');
is($node->safe_psql('from13', "SELECT dsync_acquire('kept', 'h', '1 hour')"), $kept_token,
	'a lease taken under 1.3 is still held, with its token');
is($node->safe_psql('from13', "SELECT dsync_fence('r', $kept_token) IS NULL"), 't',
	'dsync_fence works after the update');
is($node->safe_psql('from13', "SELECT dsync_acquire_shared('kept', 'r') IS NULL"), 't',
	'a shared acquire is refused while the 1.3 holder keeps the lease');
like($node->safe_psql('from13', "SELECT dsync_acquire_shared('rw', 'r')"), qr/^\d+$/,
	'dsync_acquire_shared works after the update');
is($node->safe_psql('from13', "SELECT string_agg(lease || ' ' || mode, ',' ORDER BY lease) FROM dsync_leases"),
	'kept exclusive,rw shared', 'dsync_leases shows each holder\'s mode after the update');
# The log runs while someone listens: a session listens meanwhile.
my $watch_in = "LISTEN \"dsync:kept\";\n";
my $watch = IPC::Run::start([ 'psql', '-X', '-q', '-h', $node->host, '-p', $node->port, '-d', 'from13' ],
	'<', \$watch_in, '>', \my $watch_out, '2>', \my $watch_err);
$watch->pump_nb while length $watch_in;
ok($node->poll_query_until('from13',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE 'LISTEN%kept%'"),
	'a session listens in the updated database');
$node->safe_psql('from13', "SELECT dsync_release('kept', 'h')");
ok($node->poll_query_until('from13',
		"SELECT count(*) > 0 FROM dsync_events_since(0, ARRAY['kept'])"),
	'the reaper logs events after the update, without a restart');
$watch->kill_kill;

# --- the update from 1.4 adds dsync_semaphores -----------------------------------

# A creator dropped from another database: dsync's DROP ROLE check sees
# only the database it runs in, so the definition outlives its role.
$node->safe_psql('postgres', 'CREATE DATABASE from14; CREATE ROLE r4 LOGIN; CREATE ROLE r5 LOGIN;');
$node->safe_psql('from14', "CREATE EXTENSION dsync VERSION '1.4'");
$node->safe_psql('from14', "SELECT dsync_semaphore_create('sem14', 3)",
	extra_params => [ '-U', 'r4' ]);
$node->safe_psql('from14', "SELECT dsync_semaphore_create('gone14', 2)",
	extra_params => [ '-U', 'r5' ]);
my $r5_oid = q1($node, "SELECT oid FROM pg_roles WHERE rolname = 'r5'");
isnt(scalar $node->psql('from14', 'SELECT 1 FROM dsync_semaphores', stderr => \my $sem_err), 0,
	'dsync_semaphores does not exist before the update');
$node->safe_psql('from14', 'ALTER EXTENSION dsync UPDATE');
is($node->safe_psql('from14', "SELECT extversion FROM pg_extension WHERE extname = 'dsync'"),
	'1.5', '1.4 updates to 1.5');
q1($node, 'DROP ROLE r5');
is($node->safe_psql('from14',
		"SELECT string_agg(name || ' ' || permits || ' ' || owner, ',' ORDER BY name) FROM dsync_semaphores",
		extra_params => [ '-U', 'r4' ]),
	"gone14 2 unknown (OID=$r5_oid),sem14 3 r4",
	'after the update every role reads the definitions made under 1.4, with their creators');
$node->psql('from14', 'SELECT * FROM dsync_semaphore', stderr => \$sem_err,
	extra_params => [ '-U', 'r4' ]);
like($sem_err, qr/permission denied for table dsync_semaphore/, 'but not the table');
like($node->safe_psql('from14', "SELECT dsync_acquire('sem14', 'h', '1 hour')",
		extra_params => [ '-U', 'r4' ]), qr/^\d+$/,
	'a semaphore made under 1.4 grants a permit after the update');

done_testing();
