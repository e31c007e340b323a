"""What monitoring/postgres_exporter/dsync-queries.yaml produces, for the
monitoring checks (test/monitoring_check.py without a server,
test/monitoring.py against the real exporter)."""

import os

import yaml

QUERIES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "monitoring", "postgres_exporter", "dsync-queries.yaml")


def produced_metrics(path=QUERIES):
    """<query>_<column> of every column of the queries file at path that
    is not a label."""
    names = set()
    with open(path) as f:
        for namespace, q in yaml.safe_load(f).items():
            for metric in q["metrics"]:
                for column, spec in metric.items():
                    if spec["usage"] != "LABEL":
                        names.add(f"{namespace}_{column}")
    return names
