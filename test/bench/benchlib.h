/*
 * benchlib.h: what the libpq benchmark drivers (events.c, ondemand.c)
 * share: connections and queries, samples and percentiles, dsync event
 * payloads, waiting for notifications, and /proc readings.
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
extern double proc_cpu_ms(int pid);
extern int reaper_pid(PGconn *c);

#endif
