"""Static checks of monitoring/ (a step of test/monitoring.sh), without a
server:

    /usr/bin/python3 test/monitoring_check.py [DASHBOARD.json]

- the Grafana dashboard parses and has what Grafana's import needs: a
  title, an integer schemaVersion, an `__inputs` entry DS_PROMETHEUS
  (plugin prometheus), panels each with a type, a title and a whole
  gridPos, and every panel that is not a row with targets whose expr is
  set and whose datasource, like the panel's and the template variables',
  is ${DS_PROMETHEUS}; no two panels overlap;
- every PromQL expression of the dashboard (Grafana's $__rate_interval and
  $__range put as 5m) and of monitoring/prometheus/dsync-alerts.yml, and
  every label_values() of the template variables, names only metrics that
  monitoring/postgres_exporter/dsync-queries.yaml produces or the
  exporter's own (pg_up, pg_exporter_last_scrape_error);
- the dashboard's expressions parse: they are handed to `promtool check
  rules` as recording rules (Prometheus's own parser).

Prints a line per failure and exits 1 on any.
"""

import json
import os
import re
import subprocess
import sys
import tempfile

import yaml

from monitoring_queries import produced_metrics

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DASHBOARD = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    TOP, "monitoring", "grafana", "dsync-dashboard.json")
ALERTS = os.path.join(TOP, "monitoring", "prometheus", "dsync-alerts.yml")
DS = "${DS_PROMETHEUS}"
EXPORTER_OWN = {"pg_up", "pg_exporter_last_scrape_error"}
KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
            "group_right", "offset", "bool", "inf", "nan"}

failures = []


def fail(msg):
    print("FAILED  " + msg)
    failures.append(msg)


def metric_names(expr):
    """The metric names an expression selects: identifiers outside strings,
    label matchers, ranges and grouping clauses that are not followed by
    '(' (functions, aggregations) and are not keywords."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", "", e)
    e = re.sub(r"\[[^\]]*\]", "", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    names = set()
    for m in re.finditer(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", e):
        if m.group(2) or m.group(1) in KEYWORDS or re.fullmatch(r"\d.*", m.group(1)):
            continue
        if re.fullmatch(r"[0-9]+[smhdwy]", m.group(1)):
            continue
        names.add(m.group(1))
    return names


allowed = produced_metrics() | EXPORTER_OWN
if not {"dsync_stats_grants_total", "dsync_databases_served"} <= allowed:
    fail(f"the queries file's metrics were not read: {sorted(allowed)}")

# --- the dashboard's shape -------------------------------------------------
try:
    dash = json.load(open(DASHBOARD))
except (OSError, ValueError) as e:
    fail(f"{DASHBOARD} does not parse: {e}")
    dash = {}
if not isinstance(dash.get("title"), str) or not dash.get("title"):
    fail("no title")
if not isinstance(dash.get("schemaVersion"), int):
    fail("no integer schemaVersion")
inputs = [i for i in dash.get("__inputs", []) if i.get("name") == "DS_PROMETHEUS"]
if not (inputs and inputs[0].get("type") == "datasource" and inputs[0].get("pluginId") == "prometheus"):
    fail("no __inputs entry DS_PROMETHEUS of type datasource, pluginId prometheus")
panels = dash.get("panels")
if not isinstance(panels, list) or not panels:
    fail("no panels")
    panels = []
exprs = []
cells = {}
for p in panels:
    where = f"panel {p.get('id')} ({p.get('title')!r})"
    if not p.get("type") or not p.get("title"):
        fail(f"{where}: no type or title")
    g = p.get("gridPos", {})
    if not all(isinstance(g.get(k), int) for k in ("x", "y", "w", "h")) or g.get("x", 0) + g.get("w", 0) > 24:
        fail(f"{where}: gridPos is not x, y, w, h within 24 columns: {g}")
        continue
    for x in range(g["x"], g["x"] + g["w"]):
        for y in range(g["y"], g["y"] + g["h"]):
            if (x, y) in cells:
                fail(f"{where} overlaps panel {cells[(x, y)]} at {x},{y}")
            cells[(x, y)] = p.get("id")
    if p["type"] == "row":
        continue
    if p.get("datasource", {}).get("uid") != DS:
        fail(f"{where}: datasource is not {DS}")
    targets = p.get("targets")
    if not targets:
        fail(f"{where}: no targets")
        continue
    for t in targets:
        if t.get("datasource", {}).get("uid") != DS or not t.get("expr") or not t.get("refId"):
            fail(f"{where}: a target without refId, expr or datasource {DS}: {t}")
        else:
            exprs.append((where, t["expr"]))
for v in dash.get("templating", {}).get("list", []):
    if v.get("type") == "query":
        if v.get("datasource", {}).get("uid") != DS:
            fail(f"variable {v.get('name')}: datasource is not {DS}")
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        m = re.fullmatch(r"label_values\((.*),\s*\w+\)", q or "")
        if not m:
            fail(f"variable {v.get('name')}: not label_values(SELECTOR, LABEL): {q!r}")
        else:
            exprs.append((f"variable {v.get('name')}", m.group(1)))
if len(exprs) < 10:
    fail(f"only {len(exprs)} expressions found in the dashboard")

# --- metric names, dashboard and alerts ------------------------------------
alerts = [(f"alert {r['alert']}", r["expr"]) for g in yaml.safe_load(open(ALERTS))["groups"]
          for r in g["rules"]]
for where, expr in exprs + alerts:
    names = metric_names(expr)
    if not names:
        fail(f"{where}: no metric found in {expr!r}")
    for n in sorted(names - allowed):
        fail(f"{where}: {n} is not a metric of dsync-queries.yaml or the exporter: {expr!r}")

# --- the dashboard's expressions parse (promtool) ---------------------------
rules = {"groups": [{"name": "dashboard", "rules": [
    {"record": f"dashboard:expr:{i}",
     "expr": expr.replace("$__rate_interval", "5m").replace("$__range", "5m")}
    for i, (_, expr) in enumerate(exprs)]}]}
with tempfile.NamedTemporaryFile("w", suffix=".yml") as f:
    yaml.safe_dump(rules, f)
    f.flush()
    r = subprocess.run(["promtool", "check", "rules", f.name], capture_output=True, text=True)
    if r.returncode != 0:
        fail("promtool does not parse the dashboard's expressions:\n" + r.stdout + r.stderr)

print(f"{'FAILED' if failures else 'ok'}: {len(exprs)} dashboard and {len(alerts)} alert "
      f"expressions, {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
