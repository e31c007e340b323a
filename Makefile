# dsync: PGXS build, install and test targets.

EXTENSION = dsync
MODULE_big = dsync
# One folder per layer, lowest first; src/README.md says which may call which.
DSYNC_LAYERS = base shmem wait storage events leases workers sql
OBJS = \
	src/base/settings.o \
	src/base/catalog.o \
	src/base/args.o \
	src/base/sqlexec.o \
	src/base/lazycommit.o \
	src/base/syncstandby.o \
	src/shmem/shmem.o \
	src/shmem/dbslot.o \
	src/shmem/queue.o \
	src/shmem/stats.o \
	src/wait/wait.o \
	src/wait/waitqueue.o \
	src/wait/queued.o \
	src/wait/queuedgrant.o \
	src/wait/queuedpoke.o \
	src/storage/store.o \
	src/storage/storekey.o \
	src/storage/scan.o \
	src/storage/row.o \
	src/storage/locate.o \
	src/storage/heldmap.o \
	src/storage/boundmap.o \
	src/storage/fencing.o \
	src/events/events.o \
	src/events/payload.o \
	src/events/eventlog.o \
	src/events/listen.o \
	src/events/channel.o \
	src/leases/lease.o \
	src/leases/leasehold.o \
	src/leases/permit.o \
	src/leases/queuegrant.o \
	src/leases/semaphore.o \
	src/leases/session.o \
	src/leases/shared.o \
	src/leases/multi.o \
	src/leases/member.o \
	src/leases/signal.o \
	src/leases/ephemeral.o \
	src/leases/ephgrant.o \
	src/leases/ephrelease.o \
	src/leases/ephbound.o \
	src/leases/ephemeral_record.o \
	src/leases/ephguard.o \
	src/leases/ephowner.o \
	src/leases/ephscan.o \
	src/leases/ephpool.o \
	src/leases/ephheap.o \
	src/leases/fence.o \
	src/leases/fenceddl.o \
	src/leases/fencebind.o \
	src/workers/launcher.o \
	src/workers/reaper.o \
	src/workers/reaperstart.o \
	src/workers/queuework.o \
	src/workers/expiry.o \
	src/workers/reap.o \
	src/sql/dsync.o \
	src/sql/lifecycle.o \
	src/sql/extdrop.o \
	src/sql/role.o \
	src/sql/views.o

# The install and upgrade scripts sit at the top, as in contrib.
DATA = $(sort $(wildcard dsync--*.sql))
PGFILEDESC = "dsync - leases, leader election and signals for PostgreSQL"

# sql/ and expected/ hold the pg_regress tests and nothing else;
# test/isolation the isolation specs.  Both lists are every file there,
# "setup" first: it makes the roles and helper functions the others use, so
# `make installcheck` (as a superuser, on a server with dsync in
# shared_preload_libraries and nothing else set) needs nothing else.
# test/regress.sh runs it so and again logged in as an ordinary role.
# Tests that need other server settings are in test/configured, run by the
# Perl TAP test t/036_configured_regress.pl on a server it configures.
REGRESS = setup $(filter-out setup,$(patsubst sql/%.sql,%,$(sort $(wildcard sql/*.sql))))
REGRESS_OPTS = --load-extension=dsync

ISOLATION = setup $(filter-out setup,$(patsubst test/isolation/specs/%.spec,%,$(sort $(wildcard test/isolation/specs/*.spec))))
ISOLATION_OPTS = --inputdir=test/isolation --load-extension=dsync

# Warnings are shown, not errors, so that other compilers can build dsync;
# the tests (test/suites.sh) build with COPT=-Werror, which PGXS appends.
# Headers are included by name alone ("store.h"), one -I per folder: a folder
# named storage/ must not become a prefix that could hide a server header.
PG_CPPFLAGS = $(addprefix -I$(srcdir)/src/,$(DSYNC_LAYERS))
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
PG_ISOLATION_REGRESS_BIN := $(shell $(PG_CONFIG) --pkglibdir)/pgxs/src/test/isolation/pg_isolation_regress

.PHONY: prove-installcheck
prove-installcheck:
	rm -rf $(CURDIR)/test/tap/tmp_check
	mkdir -p $(CURDIR)/test/tap/tmp_check
	cd test/tap && TESTDIR='$(CURDIR)/test/tap' TESTDATADIR='$(CURDIR)/test/tap/tmp_check' \
		PATH="$(PG_BINDIR):$$PATH" PG_REGRESS='$(PG_REGRESS_BIN)' \
		PG_ISOLATION_REGRESS='$(PG_ISOLATION_REGRESS_BIN)' \
		$(PROVE) -I '$(PG_PERL)' -I . $(PROVE_FLAGS) t/*.pl

# Each module includes the headers of what it uses; the compiler records
# which (-MMD), so an edit rebuilds only the modules that depend on it.
# The bitcode of each module (.bc, for the server's JIT) writes its list to
# a file of its own: written to the same .d, the bitcode's list (written
# last) left the object depending on its .c alone, so a header's edit left
# objects of another layout behind.
override CPPFLAGS += -MMD -MP
-include $(OBJS:.o=.d) $(OBJS:.o=.bc.d)
%.bc : %.c
	$(COMPILE.c.bc) -MF $(@:.bc=.bc.d) -o $@ $<

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

EXTRA_CLEAN = $(OBJS:.o=.d) $(OBJS:.o=.bc.d)
