-- Tasks (the MCP tasks extension) any replica answers for. The replica running a task (its
-- owner) keeps `detail`, what `tasks/get` shows, up to date and `seen_at` fresh while the task
-- is open; another replica reads them, and leaves a cancel or input responses here for the
-- owner to take. A row is deleted once it expires. Task ids are random (unguessable), as
-- rmcp makes them; no program's data is here, so there is no row-level policy.

CREATE TABLE berm_tasks (
    id text PRIMARY KEY,
    owner text NOT NULL,
    detail jsonb NOT NULL,
    terminal boolean NOT NULL DEFAULT false,
    cancel_requested boolean NOT NULL DEFAULT false,
    responses jsonb NOT NULL DEFAULT '{}'::jsonb,
    seen_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);

CREATE INDEX berm_tasks_open_by_owner ON berm_tasks (owner) WHERE NOT terminal;
CREATE INDEX berm_tasks_by_expiry ON berm_tasks (expires_at);
