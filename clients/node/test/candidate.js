'use strict';
// A leader-election candidate process for the failover test.
const { LeaderElection } = require('..');
const { direct } = require('./helpers');

const e = new LeaderElection(process.argv[2], { config: direct, ttl: 3, member: process.argv[3] });
e.on('error', () => process.exit(1));
e.start();
setInterval(() => {}, 1000);
