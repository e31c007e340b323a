# Fencing tokens across failover to a synchronous standby, when the
# granting client runs with synchronous_commit = off or local.
#
# API.md: a fencing token is "strictly greater than every token granted
# before it in that database, across restarts, crashes and failover to a
# synchronous standby".  synchronous_commit is a per-session setting any
# role may change, so one client's choice must not let a token be handed
# out twice after a failover.  dsync already flushes the sequence's WAL
# locally so that a crash cannot repeat tokens with synchronous_commit =
# off (002_crash_fencing.pl); this checks the same for failover.
#
# To make "the standby had not yet received the latest WAL" deterministic,
# the primary's walsender is stopped with SIGSTOP (a network stall would
# have the same effect), the client keeps acquiring, and the primary then
# crashes and the standby is promoted.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

for my $mode ('off', 'local')
{
	my $primary = PostgreSQL::Test::Cluster->new("primary_$mode");
	$primary->init(allows_streaming => 1);
	$primary->append_conf('postgresql.conf',
		"shared_preload_libraries = 'dsync'\n");
	$primary->start;
	$primary->safe_psql('postgres', 'CREATE EXTENSION dsync');
	$primary->backup('bkp');

	my $standby = PostgreSQL::Test::Cluster->new("standby_$mode");
	$standby->init_from_backup($primary, 'bkp', has_streaming => 1);
	$standby->start;

	my $appname = $standby->name;
	$primary->append_conf('postgresql.conf',
		"synchronous_standby_names = '$appname'\n");
	$primary->reload;
	$primary->poll_query_until('postgres',
		"SELECT sync_state = 'sync' FROM pg_stat_replication WHERE application_name = '$appname'"
	) or die "standby did not become synchronous";

	# Blocks of 1024 tokens, as before 1.3, so that 1100 grants need a new
	# one (dsync reads the increment from the catalog at each fetch).
	$primary->safe_psql('postgres',
		'ALTER SEQUENCE dsync_fencing_seq INCREMENT BY 1024');
	my $first = $primary->safe_psql('postgres',
		"SELECT dsync_acquire('warm-up', 'w', '1 hour')");
	# Tokens come in blocks of 1024 (one nextval each), and the sequence
	# WAL-logs 32 nextvals ahead.  Setting it to its own value makes the
	# next block's nextval write WAL, so the grant that needs it (the
	# 1024th after the warm-up) cannot go ahead without the standby.
	$primary->safe_psql('postgres',
		"SELECT setval('dsync_fencing_seq', last_value) FROM dsync_fencing_seq");
	$primary->wait_for_catchup($standby);

	my $walsender = $primary->safe_psql('postgres',
		"SELECT pid FROM pg_stat_replication WHERE application_name = '$appname'");
	like($walsender, qr/^\d+$/, "$mode: found the walsender");
	is(kill('STOP', $walsender), 1, "$mode: walsender stalled");

	# A client that chose synchronous_commit = $mode takes leases while the
	# standby hears nothing.  Tokens within a batch the standby already has
	# may still be handed out; the first grant that needs a new batch must
	# wait for the standby instead of handing out a token it could repeat.
	my $sql = "SET synchronous_commit = $mode;\n";
	$sql .= "SELECT dsync_acquire('lease-$_', 'old-holder', '1 hour');\n"
	  for (1 .. 1100);
	my ($out, $err) = ('', '');
	my $client = IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $primary->connstr('postgres'), '-f', '-' ],
		'<', \$sql, '>', \$out, '2>', \$err);
	# IPC::Run feeds psql's input only while the harness is pumped.
	my $waiting = 0;
	for (1 .. 600)
	{
		$client->pump_nb;
		$waiting = $primary->safe_psql('postgres',
			"SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND query LIKE '%dsync_acquire%'"
		) eq 't';
		last if $waiting;
		select(undef, undef, undef, 0.1);
	}
	ok($waiting,
		"$mode: a grant that needs a new token batch waits for the stalled standby");
	$primary->stop('immediate');
	$client->finish;
	kill('CONT', $walsender);    # it is gone by now; harmless if not

	# Every token the client ever received, flushed out when psql exited.
	my @tokens = grep { /^\d+$/ } split /\n/, $out;
	cmp_ok(scalar(@tokens), '<', 1100,
		"$mode: not every grant went through without the standby");
	my $max_seen = (sort { $b <=> $a } @tokens, $first)[0];
	$standby->promote;
	is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'),
		'f', "$mode: standby promoted");

	# Another holder now takes the last lease the old holder was granted.
	my $new = $standby->safe_psql('postgres',
		"SELECT dsync_acquire('lease-1100', 'new-holder', '1 hour')");
	like($new, qr/^\d+$/, "$mode: new holder gets lease-1100 after failover");
	cmp_ok($new, '>', $max_seen,
		"$mode: token after failover ($new) is above every token granted before it ($max_seen)"
	);

	$standby->stop;
}

done_testing();
