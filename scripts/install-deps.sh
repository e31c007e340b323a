#!/usr/bin/env bash
# Installs the Debian packages dsync needs to build, run, test and benchmark.
# Idempotent; run as root on Debian 12 (bookworm).  PostgreSQL 16, 17 and 18
# are tested in chroots (scripts/chroot.sh), not installed here.
set -euo pipefail

packages=(
	build-essential
	postgresql-15
	postgresql-server-dev-15
	postgresql-common
	postgresql-15-pgtap
	libtap-parser-sourcehandler-pgtap-perl
	libipc-run-perl
	libpq-dev
	pgbouncer
	clang
	debootstrap
	debhelper
	fakeroot
	postgresql-server-dev-all
	python3-pip
	python3-venv
	python3-psycopg
	python3-psycopg-pool
	python3-pytest
	python3-pytest-timeout
	python3-asyncpg
	python3-sqlalchemy
	python3-psycopg2
	python3-django
	python3-apscheduler
	python3-celery
	patroni
	python3-etcd
	etcd-server
	bc
	procps
	# The monitoring kit's test (test/monitoring.sh): the real exporter,
	# promtool (only in the prometheus package) and PyYAML; curl for the
	# exporter example of docs/how-to/monitoring.md.
	prometheus-postgres-exporter
	prometheus
	python3-yaml
	curl
)

missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "== installing: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The Node client's tests need node and npm (any Node 18 or later; the
# machine's own if it has one, else Debian's).
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	echo "== installing: nodejs npm"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
# The tests start PgBouncer, etcd, Patroni and the exporter themselves (the
# HA test on ports of its own); the packaged services are not wanted.
for service in pgbouncer etcd patroni prometheus prometheus-postgres-exporter; do
	if command -v systemctl >/dev/null 2>&1; then
		systemctl disable --now "$service" >/dev/null 2>&1 || true
	fi
	if [ -x "/etc/init.d/$service" ]; then
		"/etc/init.d/$service" stop >/dev/null 2>&1 || true
	fi
done
