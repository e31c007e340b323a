/*-------------------------------------------------------------------------
 *
 * ephpool.c
 *		The strings of ephemeral leases (name, holder, info), out of line in
 *		a shared pool of fixed-size chunks.
 *
 * An entry of the ephemeral table keeps only fixed-size fields; its name,
 * holder and info, one after the other, fill a chain of chunks of
 * EPHEMERAL_CHUNK_DATA bytes, as many as they need (at least one).  So a
 * lease with a short name and no info takes one 64-byte chunk, and the
 * table of dsync.ephemeral_max_leases entries stays small enough to give
 * a default of 100,000 leases in under 32 MB.  The pool has
 * EPHEMERAL_CHUNKS(dsync.ephemeral_max_leases) chunks; when it runs out, a
 * grant fails (EphemeralPoolFull) even if entries are left.
 *
 * Free chunks form one list under a spinlock.  A grant takes its whole
 * chain in one go (walking as many links as it takes chunks, under the
 * spinlock: one for a short name and holder), a removal gives it back in
 * one go (the walk to its tail done before the spinlock).  Writing and
 * reading a chain needs only the entry's partition lock: nobody else
 * reaches an entry's chunks.
 *
 * The table's keys compare by these bytes (EphemeralKeyMatch), not by
 * their hash, so two names with the same hash are two entries.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "settings.h"
#include "ephemeral_int.h"

#define CHUNK(i)	(&ephemeral_shared->pool[(i)])

/*
 * EphemeralPoolShmemSize
 *		Bytes for the pool's chunks.
 */
Size
EphemeralPoolShmemSize(void)
{
	return MAXALIGN(mul_size(EPHEMERAL_CHUNKS(dsync_ephemeral_max_leases),
							 sizeof(EphemeralChunk)));
}

/*
 * EphemeralPoolShmemInit
 *		Create or attach to the pool; found: the header was there already,
 *		its free list too.
 */
void
EphemeralPoolShmemInit(bool found)
{
	bool		pool_found;
	uint32		n = (uint32) EPHEMERAL_CHUNKS(dsync_ephemeral_max_leases);

	ephemeral_shared->pool = ShmemInitStruct("dsync ephemeral strings",
											 EphemeralPoolShmemSize(), &pool_found);
	if (found)
		return;
	for (uint32 i = 0; i < n; i++)
		ephemeral_shared->pool[i].next = i + 1 < n ? i + 1 : EPHEMERAL_NO_CHUNK;
	SpinLockInit(&ephemeral_shared->pool_mutex);
	ephemeral_shared->pool_free = n > 0 ? 0 : EPHEMERAL_NO_CHUNK;
	ephemeral_shared->pool_nfree = n;
	ephemeral_shared->pool_size = n;
}

/*
 * EphemeralChainTake
 *		A chain of n chunks off the free list, or EPHEMERAL_NO_CHUNK if the
 *		pool has fewer free.
 */
static uint32
EphemeralChainTake(uint32 n)
{
	uint32		head;
	uint32		tail;

	SpinLockAcquire(&ephemeral_shared->pool_mutex);
	if (ephemeral_shared->pool_nfree < n)
	{
		SpinLockRelease(&ephemeral_shared->pool_mutex);
		return EPHEMERAL_NO_CHUNK;
	}
	head = tail = ephemeral_shared->pool_free;
	for (uint32 i = 1; i < n; i++)
		tail = CHUNK(tail)->next;
	ephemeral_shared->pool_free = CHUNK(tail)->next;
	ephemeral_shared->pool_nfree -= n;
	SpinLockRelease(&ephemeral_shared->pool_mutex);
	CHUNK(tail)->next = EPHEMERAL_NO_CHUNK;
	return head;
}

/*
 * EphemeralChainFree
 *		Give a chain back to the pool (EPHEMERAL_NO_CHUNK: nothing).
 */
void
EphemeralChainFree(uint32 chunk)
{
	uint32		tail = chunk;
	uint32		n = 1;

	if (chunk == EPHEMERAL_NO_CHUNK)
		return;
	while (CHUNK(tail)->next != EPHEMERAL_NO_CHUNK)
	{
		tail = CHUNK(tail)->next;
		n++;
	}
	SpinLockAcquire(&ephemeral_shared->pool_mutex);
	CHUNK(tail)->next = ephemeral_shared->pool_free;
	ephemeral_shared->pool_free = chunk;
	ephemeral_shared->pool_nfree += n;
	SpinLockRelease(&ephemeral_shared->pool_mutex);
}

/*
 * EphemeralChainSeek
 *		The chunk holding byte offset of a chain, and the offset within it.
 */
static inline uint32
EphemeralChainSeek(uint32 chunk, int *offset)
{
	while (*offset >= EPHEMERAL_CHUNK_DATA)
	{
		chunk = CHUNK(chunk)->next;
		*offset -= EPHEMERAL_CHUNK_DATA;
	}
	return chunk;
}

/*
 * EphemeralChainEquals
 *		Whether len bytes of a chain from offset are bytes.
 */
bool
EphemeralChainEquals(uint32 chunk, int offset, const char *bytes, int len)
{
	chunk = EphemeralChainSeek(chunk, &offset);
	while (len > 0)
	{
		int			n = Min(len, EPHEMERAL_CHUNK_DATA - offset);

		if (memcmp(CHUNK(chunk)->data + offset, bytes, n) != 0)
			return false;
		bytes += n;
		len -= n;
		offset = 0;
		if (len > 0)
			chunk = CHUNK(chunk)->next;
	}
	return true;
}

/*
 * EphemeralChainRead
 *		Copy len bytes of a chain from offset into out.
 */
void
EphemeralChainRead(uint32 chunk, int offset, char *out, int len)
{
	chunk = EphemeralChainSeek(chunk, &offset);
	while (len > 0)
	{
		int			n = Min(len, EPHEMERAL_CHUNK_DATA - offset);

		memcpy(out, CHUNK(chunk)->data + offset, n);
		out += n;
		len -= n;
		offset = 0;
		if (len > 0)
			chunk = CHUNK(chunk)->next;
	}
}

/*
 * EphemeralChainWrite
 *		Write len bytes into a chain from offset; returns the offset after.
 */
static int
EphemeralChainWrite(uint32 chunk, int offset, const char *bytes, int len)
{
	int			end = offset + len;

	chunk = EphemeralChainSeek(chunk, &offset);
	while (len > 0)
	{
		int			n = Min(len, EPHEMERAL_CHUNK_DATA - offset);

		memcpy(CHUNK(chunk)->data + offset, bytes, n);
		bytes += n;
		len -= n;
		offset = 0;
		if (len > 0)
			chunk = CHUNK(chunk)->next;
	}
	return end;
}

/*
 * EphemeralChunksFor
 *		How many chunks a chain of bytes takes (one at least).
 */
static inline uint32
EphemeralChunksFor(int bytes)
{
	return Max(1, (bytes + EPHEMERAL_CHUNK_DATA - 1) / EPHEMERAL_CHUNK_DATA);
}

/*
 * EphemeralPutStrings
 *		Give an entry name, holder and info (NULL: none): in its own chain
 *		if they fit in as many chunks as its present strings take (so a
 *		reentrant grant that needs no more room is never refused), else in
 *		a new chain, freeing the old one;
 *		false, with the entry as it was, if the pool has no room.  The
 *		partition lock must be held exclusively.
 */
bool
EphemeralPutStrings(EphemeralEntry *entry, const char *name, int name_len,
					text *holder, const Jsonb *info)
{
	int			holder_len = VARSIZE_ANY_EXHDR(holder);
	int			info_len = info == NULL ? 0 : VARSIZE(info);
	int			total = name_len + holder_len + info_len;
	uint32		chunk = entry->key.chunk;
	int			at;

	if (chunk == EPHEMERAL_NO_CHUNK ||
		EphemeralChunksFor(total) >
		EphemeralChunksFor(entry->key.len + entry->holder_len + entry->info_len))
	{
		chunk = EphemeralChainTake(EphemeralChunksFor(total));
		if (chunk == EPHEMERAL_NO_CHUNK)
			return false;
	}
	at = EphemeralChainWrite(chunk, 0, name, name_len);
	at = EphemeralChainWrite(chunk, at, VARDATA_ANY(holder), holder_len);
	if (info_len > 0)
		(void) EphemeralChainWrite(chunk, at, (const char *) info, info_len);
	if (chunk != entry->key.chunk)
	{
		EphemeralChainFree(entry->key.chunk);
		entry->key.chunk = chunk;
	}
	entry->key.name = NULL;
	entry->holder_len = holder_len;
	entry->info_len = info_len;
	return true;
}

/*
 * EphemeralKeyMatch
 *		dynahash's comparison of a key in the table with one looked up: 0
 *		if they are the same name in the same database.  A key looked up
 *		has its bytes at name; one copied from an entry (to remove it) has
 *		none and is that entry's; an entry just entered has no chain yet,
 *		only the bytes it was entered with.
 */
int
EphemeralKeyMatch(const void *stored, const void *probe, Size keysize)
{
	const EphemeralKey *s = stored;
	const EphemeralKey *p = probe;

	if (s->dbid != p->dbid || s->len != p->len || s->hash != p->hash)
		return 1;
	if (p->name == NULL)
		return s->chunk == p->chunk ? 0 : 1;
	if (s->chunk == EPHEMERAL_NO_CHUNK)
		return memcmp(s->name, p->name, p->len) == 0 ? 0 : 1;
	return EphemeralChainEquals(s->chunk, 0, p->name, p->len) ? 0 : 1;
}

/*
 * EphemeralNameText
 *		An entry's name, as text.
 */
text *
EphemeralNameText(const EphemeralEntry *entry)
{
	text	   *t = palloc(VARHDRSZ + entry->key.len);

	SET_VARSIZE(t, VARHDRSZ + entry->key.len);
	EphemeralChainRead(entry->key.chunk, 0, VARDATA(t), entry->key.len);
	return t;
}

/*
 * EphemeralHolderText
 *		An entry's holder, as text.
 */
text *
EphemeralHolderText(const EphemeralEntry *entry)
{
	text	   *t = palloc(VARHDRSZ + entry->holder_len);

	SET_VARSIZE(t, VARHDRSZ + entry->holder_len);
	EphemeralChainRead(entry->key.chunk, entry->key.len, VARDATA(t), entry->holder_len);
	return t;
}
