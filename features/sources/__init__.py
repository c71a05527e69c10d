"""One reader per job-log format; each returns canonical rows for features.schema.validate."""
