/*
 * benchlib.h: what the libpq benchmark drivers (events.c, ondemand.c,
 * handoff.c, sem_handoff.c) share: connections and queries, samples and
 * percentiles, dsync event payloads, waiting for notifications, /proc
 * readings, command-line options, and the interleaved variants of the
 * hand-off drivers.
 */
#ifndef DSYNC_BENCHLIB_H
#define DSYNC_BENCHLIB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

/* A column or expression as microseconds since the Unix epoch, int8. */
#define US(expr) "(extract(epoch FROM " expr ") * 1000000)::int8"
#define MAX_LISTENERS 64

/* The driver's name, for error messages. */
extern const char *bench_prog;

typedef struct Samples
{
	double	   *v;
	int			n;
	int			cap;
	bool		sorted;
} Samples;

typedef struct Event
{
	char		kind[32];
	char		lease[300];
	char		holder[300];
	int64_t		fencing;
	bool		has_fencing;
	char		expires_text[64];
	int64_t		expires_us;
	bool		has_expires;
} Event;

typedef struct ProcSample
{
	long		ticks;			/* utime + stime, clock ticks */
	long		vcsw;			/* voluntary context switches */
	long		ivcsw;			/* involuntary context switches */
} ProcSample;

typedef enum
{
	OPT_INT,
	OPT_DOUBLE,
	OPT_STRING
} BenchOptionKind;

/* One command-line option: -letter stores its argument in *dest. */
typedef struct BenchOption
{
	char		letter;			/* 0 ends the table */
	BenchOptionKind kind;
	void	   *dest;
} BenchOption;

/* One variant of a hand-off driver and what was measured of it. */
typedef struct Variant
{
	const char *key;
	Samples		samples;		/* latencies, ms */
	int			anomalies;		/* iterations that went wrong (reported) */
} Variant;

typedef void (*notify_fn) (int conn, const PGnotify *n, int64_t arrival_us, void *arg);

extern void die(const char *fmt,...);
extern void *xrealloc(void *p, size_t size);
extern int64_t real_us(void);
extern int64_t mono_us(void);
extern void sleep_us(int64_t us);
extern PGconn *connect_db(const char *dbname, const char *appname, const char *options);
extern PGresult *run(PGconn *c, const char *sql, const char *p1, const char *p2,
					 const char *p3, const char *p4);
extern void run_script(PGconn *c, const char *sql);
extern int64_t int8_val(PGresult *r, int row, int col);
extern int64_t query_int8(PGconn *c, const char *sql, const char *p1, const char *p2,
						  const char *p3);
extern char *lease_table(PGconn *c);
extern char **listen_on(PGconn *listener, PGconn *helper, const char *channels_sql,
						const char *p1, const char *p2, const char *p3, int *count);
extern void push(Samples *s, double x);
extern int cmp_double(const void *x, const void *y);
extern double pct(Samples *s, double p);
extern int count_over(Samples *s, double limit);
extern void print_dist_header(void);
extern void print_dist(const char *label, Samples *s);
extern void emit_dist(const char *key, Samples *s);
extern const char *json_value(const char *json, const char *key);
extern bool json_string(const char *p, char *out, size_t size);
extern bool parse_ts(const char *s, int64_t *us);
extern bool ts_format_ok(const char *s);
extern bool parse_event(const char *payload, Event *e);
extern int pump(PGconn **conns, int nconns, int timeout_ms, notify_fn fn, void *arg);
extern bool proc_read(int pid, ProcSample *out);
extern double proc_cpu_ms(int pid);
extern int reaper_pid(PGconn *c);


extern int	parse_options(int argc, char **argv, const BenchOption *opts, void (*usage) (void));

extern void variants_init(Variant *v, int n, const char *raw_path);
extern void anomaly(int v, const char *fmt,...);
extern void add_sample(int v, int64_t usec, bool measured);
extern double run_interleaved(int nrun, int iterations, int warmup, void (*fn) (int v, bool measured));
extern void print_outliers(void);
extern PGconn *connect_commit(const char *dbname, const char *appname, const char *commit);
extern void send_query(PGconn *c, const char *sql, const char *p1, const char *p2);
extern PGresult *collect(PGconn *c, int v, const char *what);
extern bool null_at(PGresult *r, int col);
extern int64_t int8_at(PGresult *r, int col);
extern bool bool_at(PGresult *r, int col);
extern int64_t wait_until_asleep(PGconn *monitor, PGconn *waiter, const char *kind);
extern void force_clean(PGconn *monitor, const char *name);
extern int64_t take_lease(int v, PGconn *c, PGconn *monitor, const char *name,
						  const char *holder, const char *ttl, bool durable);
extern int64_t take(int v, PGconn *c, PGconn *monitor, const char *name, const char *holder,
					const char *ttl);
extern void release_as(int v, PGconn *c, const char *name, const char *holder);
extern bool lease_handoff(int v, PGconn *releaser, PGconn *waiter, PGconn *monitor,
						  const char *name, const char *kind, const char *wname,
						  int64_t token_a, bool durable, int64_t *latency);
extern int64_t dsync_handoff(int v, PGconn *releaser, PGconn *waiter, PGconn *monitor,
							 const char *name, const char *kind, const char *wname,
							 int64_t token_a);
extern bool advisory_handoff(int v, PGconn *holder, PGconn *waiter, PGconn *monitor,
							 const char *key, int64_t *from_before, int64_t *from_after);

#endif
