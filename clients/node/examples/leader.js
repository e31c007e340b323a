'use strict';
// A leader-elected background job (grelmicro's LeaderElection,
// mongoelector's on_leader / on_leader_loss) as an EventEmitter.
const { LeaderElection } = require('..');

const config = process.env.DSYNC_DSN ? require('../test/helpers').direct : {};

const election = new LeaderElection('node-reports', { config, ttl: 15, info: { role: 'report-runner' } });
election.on('elected', async (token) => {
  console.log(`I am the leader now (token ${token})`);
  const members = await election.members();
  console.log(`running the job with ${members.length} member(s) in the group`);
  await election.stop();
});
election.on('lost', () => console.log('no longer the leader'));
election.on('error', (e) => { console.error(e); process.exit(1); });
election.start();
