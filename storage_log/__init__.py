"""storage_log: the checksummed, LMDB-indexed, append-only stream log."""
