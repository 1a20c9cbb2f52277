-- keel store, schema version 29: the double-texting policies (issue 34, DESIGN.md section 14).
--
-- rollback: a run the user rolled back (by sending a message under the `rollback` policy) keeps
-- its messages in the store, but a new run's context leaves them out. The mark is on the run,
-- set when the rollback is asked for, so messages the run commits after it (on its way to the
-- cancel) are hidden too, and a restart forgets nothing. It names the run that replaced it.
--
-- Never edit this file once released (see 0001_init.sql for the conventions).

ALTER TABLE runs ADD COLUMN rolled_back_by TEXT;

CREATE INDEX runs_rolled_back ON runs (session_id) WHERE rolled_back_by IS NOT NULL;
