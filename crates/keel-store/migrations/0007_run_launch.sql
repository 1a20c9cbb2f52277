-- keel store, schema version 7: a run remembers how it was launched and which process drives
-- it, so that a resume goes on the same way and a dead worker does not block it.
--
-- Never edit this file once released (see 0001_init.sql for the conventions).

-- How the run was launched, in its launcher's words (the keel CLI's launch spec, as JSON: the
-- provider, its API and base URL, the model chain, the workspace, the limits; never a key).
-- NULL for runs from before this version, and for runs whose launcher said nothing.
ALTER TABLE runs ADD COLUMN launch TEXT;
-- The process that last drove the run, as JSON ({"host", "pid", "started"}); NULL when
-- unknown.
ALTER TABLE runs ADD COLUMN worker TEXT;
