"""What a run reads: a pipeline's source, from its files to the chunks the ingest reads.

===============  ===============================================================================
``types``        the types of a planned source: chunks, column types, :class:`SourcePlan`
``times``        what a time field may hold and its one conversion to int64 microseconds
``order``        late rows and ``allowed_lateness``: which rows are late, the order of the others
``read``         reading a source's bytes: headers, the Arrow parse of a chunk, the row checks
``check``        chunk planning of a source's files: the entry per file, csv and jsonl files
``parquet``      chunk planning of a parquet file: whole row groups, from its footer
``file_state``   :class:`FileState`: what a planning pass carries from chunk to chunk and file
                 to file (column types, next seq, last time, the chunks)
``scan``         a text file's bytes unparsed: its chunk boundaries and digests, one line of it
``files``        a file source's files: the listing in name order, a file's format, its digest
``folder``       a ``stream-dir`` source: new files in name order, ``_END`` ends it
``planner``      the entry: :func:`plan_source` plans a spec's source (and checks its rows)
``fingerprint``  a bounded source's fingerprint, checked up to what a resumed ingest read
``stored``       a bounded source's plan kept in the run directory: a resume takes it unplanned
``chunk_report`` the tasks' reports of the chunks they read (rows, digest): a text source's row
                 counts when cut by bytes, and the fingerprint of what a run read
``bridge``       any Spark streaming source (Kafka) into a stream folder
===============  ===============================================================================

First read: ``planner.py``. Pure of Spark except ``bridge`` (it writes from a Spark
stream); everything is read from the bytes, so a re-read after a crash plans and reads
the same rows.
"""
