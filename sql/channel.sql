-- dsync_channel: readable when it fits in 63 bytes, a stable hash otherwise.
CREATE EXTENSION IF NOT EXISTS dsync;

SELECT dsync_channel('billing');
SELECT dsync_channel('Leader Election/eu-west');
-- 57 bytes of name fit: 'dsync:' + 57 = 63 bytes
SELECT dsync_channel(repeat('x', 57)) = 'dsync:' || repeat('x', 57) AS readable_57,
	   octet_length(dsync_channel(repeat('x', 57))) AS len_57;
-- 58 bytes do not: a hash-based name, itself within the limit
SELECT dsync_channel(repeat('x', 58)) AS hashed_58,
	   octet_length(dsync_channel(repeat('x', 58))) AS len_58;
SELECT dsync_channel(repeat('x', 255)) AS hashed_255;
-- multibyte names count bytes, not characters
SELECT octet_length(dsync_channel(repeat('é', 28) || 'x')) AS len_multibyte_fits,
	   dsync_channel(repeat('é', 29)) LIKE 'dsync#%' AS multibyte_hashed;
-- stable and distinct
SELECT dsync_channel(repeat('y', 100)) = dsync_channel(repeat('y', 100)) AS stable,
	   dsync_channel(repeat('y', 100)) <> dsync_channel(repeat('y', 101)) AS distinct_names;
-- usable with LISTEN without truncation
SELECT dsync_channel(repeat('x', 58)) AS ch \gset
LISTEN :"ch";
SELECT pg_listening_channels() = :'ch' AS listening_on_full_name;
UNLISTEN *;
