"""Immutable search artifacts: build, validate, checksum, publish, roll back, retain.

A build copies the serving subset of the state database into a new DuckDB file that
nothing ever writes again; Great Expectations validates it in a fresh read-only process;
only a validated file, with its checksum and manifest, can become `current`. Readers
therefore never see a file that is being written.
"""
