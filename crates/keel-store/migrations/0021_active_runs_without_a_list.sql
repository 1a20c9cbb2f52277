-- keel store, schema version 21: the partial index of unfinished runs (`runs_active`, 0004)
-- names the finished states one comparison at a time instead of in a `NOT IN` list.
--
-- Why: SQLite evaluates a list of constants by building a temporary B-tree of them, each time
-- a statement evaluates the index's predicate, and a statement evaluates it whenever a run is
-- inserted or its state changes: once when a run starts, twice (old row, new row) when it
-- ends. Opening, filling and closing that B-tree (page cache, allocations) was ~9% of the
-- store writer's samples at 100 conversations × 11 model calls (issue 18). Six comparisons
-- cost nothing of the kind. Queries that read the index must repeat this predicate word for
-- word (keel-store's `ACTIVE_RUNS`).
DROP INDEX runs_active;
CREATE INDEX runs_active ON runs (started_at, id)
    WHERE state <> 'completed' AND state <> 'cancelled' AND state <> 'timed_out'
        AND state <> 'max_steps' AND state <> 'budget_exceeded' AND state <> 'error';
