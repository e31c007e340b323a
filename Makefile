# dsync: PGXS build, install and test targets.

EXTENSION = dsync
MODULE_big = dsync
OBJS = \
	src/dsync.o \
	src/shmem.o \
	src/catalog.o \
	src/args.o \
	src/store.o \
	src/scan.o \
	src/locate.o \
	src/listen.o \
	src/heldmap.o \
	src/row.o \
	src/fencing.o \
	src/lease.o \
	src/channel.o \
	src/views.o \
	src/wait.o \
	src/events.o \
	src/dbslot.o \
	src/queue.o \
	src/launcher.o \
	src/lifecycle.o \
	src/extdrop.o \
	src/reaper.o \
	src/expiry.o \
	src/reap.o \
	src/semaphore.o \
	src/permit.o \
	src/stats.o \
	src/role.o \
	src/signal.o \
	src/member.o \
	src/ephemeral.o \
	src/ephemeral_record.o \
	src/ephscan.o \
	src/ephowner.o \
	src/ephguard.o \
	src/fence.o \
	src/fenceddl.o \
	src/eventlog.o \
	src/session.o \
	src/multi.o \
	src/shared.o \
	src/sqlexec.o

# The install and upgrade scripts sit at the top, as in contrib.
DATA = $(sort $(wildcard dsync--*.sql))
PGFILEDESC = "dsync - leases, leader election and signals for PostgreSQL"

# sql/ and expected/ hold the pg_regress tests and nothing else;
# test/isolation the isolation specs.  Both lists are every file there,
# "setup" first: it makes the roles and helper functions the others use, so
# `make installcheck` (as a superuser, on a server with dsync in
# shared_preload_libraries) needs nothing else.  test/regress.sh runs it so
# and again logged in as an ordinary role.
REGRESS = setup $(filter-out setup,$(patsubst sql/%.sql,%,$(sort $(wildcard sql/*.sql))))
REGRESS_OPTS = --load-extension=dsync

ISOLATION = setup $(filter-out setup,$(patsubst test/isolation/specs/%.spec,%,$(sort $(wildcard test/isolation/specs/*.spec))))
ISOLATION_OPTS = --inputdir=test/isolation --load-extension=dsync

# Warnings are shown, not errors, so that other compilers can build dsync;
# the tests (test/suites.sh) build with COPT=-Werror, which PGXS appends.
PG_CFLAGS = -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers
PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# Perl TAP tests (PostgreSQL::Test::Cluster).  Debian's PGXS disables its own
# prove targets, so this one runs them against the installed server.  They
# start their own clusters, which initdb refuses to do as root: run as an
# ordinary user (test/run_all.sh does).
PROVE ?= prove
PG_BINDIR := $(shell $(PG_CONFIG) --bindir)
PG_PERL := $(shell $(PG_CONFIG) --pkglibdir)/pgxs/src/test/perl
PG_REGRESS_BIN := $(shell $(PG_CONFIG) --pkglibdir)/pgxs/src/test/regress/pg_regress

.PHONY: prove-installcheck
prove-installcheck:
	rm -rf $(CURDIR)/test/tap/tmp_check
	mkdir -p $(CURDIR)/test/tap/tmp_check
	cd test/tap && TESTDIR='$(CURDIR)/test/tap' TESTDATADIR='$(CURDIR)/test/tap/tmp_check' \
		PATH="$(PG_BINDIR):$$PATH" PG_REGRESS='$(PG_REGRESS_BIN)' \
		$(PROVE) -I '$(PG_PERL)' -I . $(PROVE_FLAGS) t/*.pl

# Each module includes the headers of what it uses; the compiler records
# which (-MMD), so an edit rebuilds only the modules that depend on it.
override CPPFLAGS += -MMD -MP
-include $(OBJS:.o=.d)

# The command-line tool: cli/, a PGXS PROGRAM of its own (cli/Makefile),
# built, installed and cleaned with the extension.
.PHONY: cli install-cli clean-cli
all: cli
cli:
	$(MAKE) -C cli PG_CONFIG='$(PG_CONFIG)'
install: install-cli
install-cli: cli
	$(MAKE) -C cli install PG_CONFIG='$(PG_CONFIG)'
clean: clean-cli
clean-cli:
	$(MAKE) -C cli clean PG_CONFIG='$(PG_CONFIG)'

EXTRA_CLEAN = $(OBJS:.o=.d)
