"""A leader-elected background job with callbacks (mongoelector's
MongoLeaderElector, grelmicro's LeaderElection): only the leader works."""

import os
import threading

from dsync import LeaderElection

dsn = os.environ.get("DSYNC_DSN", "dbname=app")
elected = threading.Event()


def became_leader():
    print("I am the leader now")
    elected.set()


def lost_leadership():
    print("no longer the leader")


with LeaderElection("reports", conninfo=dsn, ttl=15, info={"role": "report-runner"},
                    on_leader=became_leader, on_leader_loss=lost_leadership) as election:
    elected.wait(30)
    if election.is_leader:                   # properties: they never wait
        print("running the job as", election.member,
              "with", len(election.members()), "member(s) in the group;",
              "status:", election.status)
