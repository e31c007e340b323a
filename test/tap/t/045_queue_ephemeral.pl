# Queued waiters and ephemeral leases, where the worker's pass cannot grant.
#
#  1. A durable waiter queued behind an ephemeral holder: each try of its
#     grant (inserting the name's row, then finding the ephemeral holder)
#     fails.  The worker, poked once, tries once and sleeps: the failed
#     try's wake-up used to poke it again, and it spun through passes on a
#     core until the holder let go.  The release then grants to the
#     waiter in its own transaction.
#  2. After a crash restart, in a database whose ephemeral leases were in
#     use, grants wait until no ephemeral holder from before can be live
#     (dsync.ephemeral_max_ttl).  A waiter that queued meanwhile is granted
#     by its next renewal (dsync_claim) once that time is over: nothing
#     else frees the name, and it used to stay queued for as long as it
#     renewed.  Its ephemeral twin likewise.
#  3. An ephemeral waiter whose grant must raise a fence bound to the lease
#     while a writer of the old token holds it: the grant is made, the
#     raise finds the writer, and the try (grant included) is rolled back.
#     The worker sleeps meanwhile: the undone grant's wake-up used to poke
#     it again, and it spun until the writer committed.  The waiter's
#     renewal is granted once the writer has committed.
use strict;
use warnings;

use Time::HiRes qw(usleep time);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib '.';
use DsyncTest;

my $max_ttl = 6;
my $node = dsync_node('queue_ephemeral', "dsync.ephemeral_max_ttl = $max_ttl",
	'restart_after_crash = on');

# CPU time of a process, in clock ticks (user + system).
sub cpu_ticks
{
	my ($pid) = @_;
	open my $fh, '<', "/proc/$pid/stat" or die "cannot read /proc/$pid/stat: $!";
	my $stat = <$fh>;
	close $fh;
	$stat =~ s/^.*\) //;
	my @f = split / /, $stat;
	return $f[11] + $f[12];
}

# 1. A durable waiter behind an ephemeral holder.
ok(wait_for($node,
		"SELECT dsync_acquire('qe', 'a', '${max_ttl} s', wait => '30 s', durable => false) IS NOT NULL",
		60), 'ephemeral leases are granted once the start is far enough behind');
is(q1($node, "SELECT dsync_queue('qe', 'dur', '60 s') IS NULL"), 't', 'dur is queued');
my $reaper = reaper_pid($node);
# Something wakes the name's channel: a blocked acquirer that gives up.
is(q1($node, "SELECT dsync_acquire('qe', 'x', wait => '100 ms') IS NULL"), 't',
	'a blocked acquirer gives up, waking the line');
q1($node, "SELECT dsync_renew('qe', 'a')");
my $before = cpu_ticks($reaper);
sleep 3;
my $used = cpu_ticks($reaper) - $before;
# Bounds, not timings: a spinning worker uses about 3 s of CPU in 3 s.
cmp_ok($used, '<', 100, "the worker sleeps meanwhile ($used ticks of CPU in 3 s)");
is(q1($node, "SELECT dsync_release('qe', 'a')"), 't', 'the ephemeral holder lets go');
is(q1($node, "SELECT holder FROM dsync_leases WHERE lease = 'qe'"), 'dur',
	'the release granted to dur at once');
is(q1($node, "SELECT state FROM dsync_claim('qe', 'dur')"), 'granted', 'dur claims it');
q1($node, "SELECT dsync_release('qe', 'dur')");

# 2. The hold-back after a crash restart.
q1($node, "SELECT dsync_acquire('hb', 'old', '${max_ttl} s', durable => false)");
crash_restart($node);
my $started = time;
is(q1($node, "SELECT dsync_queue('hb', 'w', '60 s') IS NULL"), 't',
	'a durable waiter queues: grants are held back');
is(q1($node, "SELECT dsync_queue('hb2', 'e', '${max_ttl} s', durable => false) IS NULL"), 't',
	'so does an ephemeral one');
is(q1($node, "SELECT state FROM dsync_claim('hb', 'w')"), 'queued',
	'its renewal during the hold-back keeps it queued');
# Renew as a client would, until the hold-back is over and a little more.
my ($state, $state_e) = ('', '');
while (time < $started + $max_ttl + 20)
{
	$state = q1($node, "SELECT state FROM dsync_claim('hb', 'w')") if $state ne 'granted';
	$state_e = q1($node, "SELECT state FROM dsync_claim('hb2', 'e')") if $state_e ne 'granted';
	last if $state eq 'granted' && $state_e eq 'granted';
	usleep(500_000);
}
is($state, 'granted', 'after the hold-back, the durable waiter\'s renewal is granted');
is($state_e, 'granted', 'so is the ephemeral waiter\'s');
is(q1($node, "SELECT string_agg(lease || '=' || holder, ',' ORDER BY lease) FROM dsync_leases "
		  . "WHERE lease IN ('hb', 'hb2')"), 'hb=w,hb2=e', 'each holds its lease');
is(q1($node, "SELECT count(*) FROM dsync_waiters WHERE name IN ('hb', 'hb2')"), '0',
	'nobody is left queued');

# 3. A busy bound fence behind an ephemeral grant.
q1($node, 'CREATE TABLE fenced (id int PRIMARY KEY, token bigint NOT NULL)');
q1($node, "CREATE TRIGGER fenced_t BEFORE INSERT OR UPDATE ON fenced "
	  . "FOR EACH ROW EXECUTE FUNCTION dsync_fenced('token', 'fl')");
my $old = q1($node, "SELECT dsync_acquire('fl', 'old', '${max_ttl} s', durable => false)");
q1($node, "INSERT INTO fenced VALUES (1, $old)");
my $writer = psql_client($node, q1($node, 'SELECT current_user'));
ok(send_wait($writer, "BEGIN; UPDATE fenced SET token = $old; SELECT 'written';", qr/written/),
	'a writer of the old token holds the fence');
is(q1($node, "SELECT dsync_queue('fl', 'w', '${max_ttl} s', durable => false) IS NULL"), 't',
	'an ephemeral waiter queues');
is(q1($node, "SELECT dsync_release('fl', 'old')"), 't',
	'the holder lets go; its grant to w cannot raise the fence');
is(q1($node, "SELECT dsync_leader('fl') IS NULL"), 't', 'so the lease is free');
$reaper = reaper_pid($node);
$before = cpu_ticks($reaper);
sleep 3;
$used = cpu_ticks($reaper) - $before;
cmp_ok($used, '<', 100, "the worker sleeps meanwhile ($used ticks of CPU in 3 s)");
is(q1($node, "SELECT state FROM dsync_claim('fl', 'w')"), 'queued',
	'the waiter\'s renewal keeps it queued while the writer writes');
ok(send_wait($writer, "COMMIT; SELECT 'committed';", qr/committed/), 'the writer commits');
is(q1($node, "SELECT state FROM dsync_claim('fl', 'w')"), 'granted',
	'the waiter\'s next renewal is granted');
is(q1($node, "SELECT token = (SELECT fencing FROM dsync_leases WHERE lease = 'fl') "
		  . "FROM dsync_fences WHERE lease = 'fl'"), 't', 'and the fence is raised to its token');

done_testing();
