-- A task's row holds a program's result and questions (`detail`) and a client's answers
-- (`responses`): program and client data, which 0002 said this table would not hold. From this
-- version bermd seals both before they are written (ChaCha20-Poly1305 under a key derived from
-- the ask key the replicas share, each value bound to its task and field): `detail` is the
-- sealed bytes, and each answer in `responses` is its sealed bytes as Base64 text under its key,
-- so the database, its backups and its logs hold neither in the clear.
--
-- Rows of the old form are deleted: a task lives at most two TTLs, and a replica of this
-- version could not read them. A replica of an older version still running finds it cannot
-- record its tasks (it says so to the client, and the task is cancelled) until it is upgraded.

DELETE FROM berm_tasks;
ALTER TABLE berm_tasks ALTER COLUMN detail TYPE bytea USING convert_to(detail::text, 'UTF8');
