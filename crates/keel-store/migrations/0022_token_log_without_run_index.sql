-- keel store, schema version 22: the token log's index by run (0010) is dropped.
--
-- Why: nothing reads the token log by run. Its readers ask by month (a month's usage lines,
-- through `token_log_by_month`; a user's month total comes from `usage_log`), yet every model
-- call inserted its run's entry into this index: one more leaf, somewhere among the runs, in
-- the commit of each model call's boundary (issue 18). A reader by run, if one comes, adds the
-- index back with its query.
--
-- Never edit this file once released (see 0001_init.sql for the conventions).

DROP INDEX token_log_by_run;
