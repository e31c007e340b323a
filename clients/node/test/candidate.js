'use strict';
// A leader-election candidate process for the failover test:
// node candidate.js GROUP MEMBER.  Run without arguments (node --test runs
// every file of this directory) it does nothing.
const { LeaderElection } = require('..');
const { direct } = require('./helpers');

if (process.argv[2]) {
  const e = new LeaderElection(process.argv[2], { config: direct, ttl: 3, member: process.argv[3] });
  e.on('error', () => process.exit(1));
  e.start();
  setInterval(() => {}, 1000);
}
