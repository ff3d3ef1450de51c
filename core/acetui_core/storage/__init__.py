"""The run store: the SQLite file, its schema, rows as records, what is written and read, the files beside it, whether a run's process is alive."""
