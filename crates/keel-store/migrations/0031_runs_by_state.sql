-- Issue 38: the run list filtered by a state that ends a run (`/runs?state=error` in the console,
-- `GET /v1/runs?state=`) walked `runs_by_started` through every stored run to find a page: 200 ms
-- at 100,000 runs. With the state first, a page is a range of this index. (Unfinished states
-- use `runs_active`, whose WHERE clause the query repeats.)
CREATE INDEX IF NOT EXISTS runs_by_state ON runs (state, started_at, id);
