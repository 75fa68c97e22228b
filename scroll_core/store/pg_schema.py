"""Numbered schema migrations of the Event Log on PostgreSQL (see ``sqlite_schema`` for SQLite).

The same rules as on SQLite: each migration runs once, in one transaction together with the
row recording it in ``_scroll_migrations``, and a shipped migration is never edited. DDL is
transactional in PostgreSQL, so a migration that fails leaves nothing behind. Concurrent
openers serialise on a transaction-scoped advisory lock.

How the guarantees are kept by the database rather than by the client:

- ``events`` and ``payloads`` refuse UPDATE, DELETE and TRUNCATE by trigger, whoever asks
  (the owner included), and the application role ``scroll_writer`` is granted only INSERT
  and SELECT on them (SELECT only on everything else).
- ``seq`` is assigned by a BEFORE INSERT trigger under a transaction-scoped advisory lock
  (see ``m001_initial`` for why commit order is then seq order).
- The derived tables (``session_stats``, ``events_fts``, ``fts_agent_terms``,
  ``fts_agent_totals``; ``fts_terms`` and ``fts_totals`` until ``m004``) are
  written only by the statement-level AFTER INSERT trigger of ``events``. Their guard asks
  the question SQLite cannot: ``pg_trigger_depth()`` is 1 for a statement a client sends,
  2 for one the events trigger runs, so any direct write is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .schema_common import APPEND_ONLY_MESSAGE

__all__ = [
    "APPEND_ONLY_SQLSTATE",
    "HOST_READER_ROLE",
    "MIGRATIONS",
    "READER_ROLE",
    "SEQ_LOCK",
    "TS_CONFIG",
    "WRITER_ROLE",
    "migrate",
]

# The SQLSTATE of every refusal to change history (class "SC" is not used by PostgreSQL).
APPEND_ONLY_SQLSTATE = "SC001"
# Keys of the transaction-scoped advisory locks: seq assignment, and migrations.
SEQ_LOCK = 0x5C2011
_MIGRATE_LOCK = 0x5C2012
# The application roles (cluster-wide, NOLOGIN; a deployment grants them to its login roles).
WRITER_ROLE = "scroll_writer"
READER_ROLE = "scroll_reader"
HOST_READER_ROLE = "scroll_host_reader"
# English snowball stemming with no stop-word list: like FTS5's porter tokenizer, every
# word is indexed and counts towards a document's length (stop words are dropped from the
# query, by ``fts_query``, on both backends).
TS_CONFIG = "scroll_english"

Migration = Callable[[Any, str], None]


def _create_role(db: Any, role: str) -> None:
    # Roles are shared by every database of the cluster: another database's migration may
    # have made it (or be making it right now).
    db.execute(
        f"""
        DO $$ BEGIN
            IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{role}') THEN
                CREATE ROLE {role} NOLOGIN;
            END IF;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
        END $$
        """
    )


def m001_initial(db: Any, schema: str) -> None:
    """Events, payloads, the session summary and the BM25 statistics, with their triggers.

    Why a reader never sees a seq appear below one it has already seen: every INSERT into
    ``events`` first takes ``pg_advisory_xact_lock(SEQ_LOCK)`` in the BEFORE INSERT trigger
    and only then reads ``max(seq)`` to number its rows. A transaction-scoped advisory lock
    is released only when the transaction ends, after its commit has become visible to new
    snapshots (``CommitTransaction`` marks the transaction committed in the proc array
    before it releases its locks). So the next writer cannot even choose its first seq
    until every lower seq is visible or rolled back (and a rolled-back seq is chosen again,
    never skipped): commit order is seq order, and any snapshot holding seq N holds every
    seq below N. A sequence (``nextval``) would not do: it is handed out at INSERT time,
    and a transaction holding seq 7 can commit after one holding seq 8.
    """
    refused = f"{APPEND_ONLY_MESSAGE}: % of % is not allowed"
    db.execute(
        f"""
        CREATE TABLE events (
            seq BIGINT PRIMARY KEY CHECK (seq > 0),
            session_id TEXT NOT NULL,
            agent_id TEXT NOT NULL DEFAULT 'main',
            kind TEXT NOT NULL,
            role TEXT,
            name TEXT,
            content TEXT NOT NULL,
            tool_call_id TEXT,
            tool_input TEXT,
            payload_ref TEXT,
            payload_size BIGINT,
            payload_media TEXT,
            headline TEXT,
            metadata TEXT NOT NULL DEFAULT '{{}}',
            created_at TEXT NOT NULL,
            tokens INTEGER NOT NULL,
            dedup_key TEXT,
            searchable INTEGER NOT NULL DEFAULT 1
        );
        CREATE UNIQUE INDEX events_dedup ON events(session_id, dedup_key)
            WHERE dedup_key IS NOT NULL;
        CREATE INDEX events_session_seq ON events(session_id, seq);
        CREATE INDEX events_agent_seq ON events(agent_id, seq);
        CREATE INDEX events_created_at ON events(created_at);
        CREATE INDEX events_tool_call ON events(tool_call_id) WHERE tool_call_id IS NOT NULL;

        CREATE TABLE payloads (
            ref TEXT PRIMARY KEY CHECK (ref ~ '^sha256:[0-9a-f]{{64}}$'),
            size BIGINT NOT NULL,
            data BYTEA NOT NULL
        );

        CREATE TABLE session_stats (
            session_id TEXT PRIMARY KEY,
            agent_id TEXT NOT NULL,
            events BIGINT NOT NULL,
            tokens BIGINT NOT NULL,
            first_seq BIGINT NOT NULL,
            last_seq BIGINT NOT NULL,
            first_at TEXT NOT NULL,
            last_at TEXT NOT NULL
        );
        CREATE INDEX session_stats_last_seq ON session_stats(last_seq);

        CREATE TEXT SEARCH DICTIONARY scroll_stem (TEMPLATE = snowball, Language = english);
        CREATE TEXT SEARCH CONFIGURATION {TS_CONFIG} (COPY = english);
        ALTER TEXT SEARCH CONFIGURATION {TS_CONFIG}
            ALTER MAPPING REPLACE english_stem WITH scroll_stem;

        -- The full-text index: one tsvector per searchable event, content weighted D,
        -- headline A, name C (the column weights of BM25 map onto these labels), and the
        -- document length in tokens.
        CREATE TABLE events_fts (
            seq BIGINT PRIMARY KEY,
            tsv TSVECTOR NOT NULL,
            doclen INTEGER NOT NULL
        );
        CREATE INDEX events_fts_tsv ON events_fts USING gin (tsv);
        -- Per-lexeme document frequencies and the totals BM25 needs (N, average length).
        CREATE TABLE fts_terms (lexeme TEXT PRIMARY KEY, docs BIGINT NOT NULL);
        CREATE TABLE fts_totals (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            docs BIGINT NOT NULL,
            tokens BIGINT NOT NULL
        );
        INSERT INTO fts_totals VALUES (1, 0, 0);

        CREATE FUNCTION scroll_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            RAISE EXCEPTION '{refused}', TG_OP, TG_TABLE_NAME
                USING ERRCODE = '{APPEND_ONLY_SQLSTATE}';
        END $$;

        CREATE FUNCTION scroll_derived_guard() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'DELETE' OR pg_trigger_depth() < 2 THEN
                RAISE EXCEPTION '{APPEND_ONLY_MESSAGE}: % only follows appended events '
                    '(% refused)', TG_TABLE_NAME, TG_OP USING ERRCODE = '{APPEND_ONLY_SQLSTATE}';
            END IF;
            IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
            RETURN NEW;
        END $$;

        CREATE FUNCTION scroll_events_number() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
            top BIGINT;
        BEGIN
            PERFORM pg_advisory_xact_lock({SEQ_LOCK});
            SELECT coalesce(max(seq), 0) INTO top FROM {schema}.events;
            IF NEW.seq IS NULL THEN
                NEW.seq := top + 1;
            ELSIF NEW.seq <= top THEN
                RAISE EXCEPTION '{APPEND_ONLY_MESSAGE}: an INSERT may not reuse or go below '
                    'seq % (got %)', top, NEW.seq USING ERRCODE = '{APPEND_ONLY_SQLSTATE}';
            END IF;
            RETURN NEW;
        END $$;

        CREATE FUNCTION scroll_events_appended() RETURNS trigger LANGUAGE plpgsql
        SECURITY DEFINER SET search_path = {schema}, pg_catalog AS $$
        BEGIN
            INSERT INTO session_stats AS s
            SELECT session_id, min(agent_id), count(*), sum(tokens), min(seq), max(seq),
                   min(created_at), max(created_at)
            FROM appended GROUP BY session_id
            ON CONFLICT (session_id) DO UPDATE SET
                agent_id = least(s.agent_id, excluded.agent_id),
                events = s.events + excluded.events,
                tokens = s.tokens + excluded.tokens,
                last_seq = greatest(s.last_seq, excluded.last_seq),
                first_at = least(s.first_at, excluded.first_at),
                last_at = greatest(s.last_at, excluded.last_at);

            WITH indexed AS (
                INSERT INTO events_fts (seq, tsv, doclen)
                SELECT a.seq, v.tsv,
                       coalesce((SELECT max(p) FROM unnest(v.tsv) AS u, unnest(u.positions) AS p),
                                0)
                FROM appended AS a,
                LATERAL (SELECT
                    setweight(to_tsvector('{TS_CONFIG}', a.content), 'D')
                    || setweight(to_tsvector('{TS_CONFIG}', coalesce(a.headline, '')), 'A')
                    || setweight(to_tsvector('{TS_CONFIG}', coalesce(a.name, '')), 'C') AS tsv
                ) AS v
                WHERE a.searchable = 1
                RETURNING seq, tsv, doclen
            ), terms AS (
                INSERT INTO fts_terms AS t (lexeme, docs)
                SELECT u.lexeme, count(*) FROM indexed, unnest(indexed.tsv) AS u
                GROUP BY u.lexeme
                ON CONFLICT (lexeme) DO UPDATE SET docs = t.docs + excluded.docs
            )
            UPDATE fts_totals SET docs = fts_totals.docs + x.docs,
                                  tokens = fts_totals.tokens + x.tokens
            FROM (SELECT count(*) AS docs, coalesce(sum(doclen), 0) AS tokens FROM indexed) AS x
            WHERE fts_totals.id = 1 AND x.docs > 0;
            RETURN NULL;
        END $$;

        CREATE TRIGGER events_number BEFORE INSERT ON events
            FOR EACH ROW EXECUTE FUNCTION scroll_events_number();
        CREATE TRIGGER events_appended AFTER INSERT ON events
            REFERENCING NEW TABLE AS appended
            FOR EACH STATEMENT EXECUTE FUNCTION scroll_events_appended();
        """
    )
    for table in ("events", "payloads"):
        db.execute(
            f"CREATE TRIGGER {table}_no_change BEFORE UPDATE OR DELETE ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION scroll_refuse()"
        )
    for table in ("session_stats", "events_fts", "fts_terms", "fts_totals"):
        db.execute(
            f"CREATE TRIGGER {table}_guard BEFORE INSERT OR UPDATE OR DELETE ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION scroll_derived_guard()"
        )
    tables = ("events", "payloads", "session_stats", "events_fts", "fts_terms", "fts_totals")
    for table in tables:
        db.execute(
            f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
            "FOR EACH STATEMENT EXECUTE FUNCTION scroll_refuse()"
        )
    _create_role(db, WRITER_ROLE)
    db.execute(f"GRANT USAGE ON SCHEMA {schema} TO {WRITER_ROLE}")
    db.execute(f"GRANT SELECT ON {', '.join(tables)}, _scroll_migrations TO {WRITER_ROLE}")
    db.execute(f"GRANT INSERT ON events, payloads TO {WRITER_ROLE}")


def m002_ms_reader(db: Any, schema: str) -> None:
    """The read-only role ``ms.sql_query`` runs model SQL as, with row-level security.

    Which agents a model connection may read is kept in ``scroll_scope``, keyed by that
    connection's backend pid, and written only by the host (the writer role). The policies
    on ``events`` and ``session_stats`` compare ``agent_id`` with the row of
    ``pg_backend_pid()``. Why not a setting (``SET LOCAL scroll.agents``): any role may
    change a custom setting, with ``set_config()`` inside the very SELECT it is guarding or
    with ``SET`` from a DO block, and a model writes that SELECT. A pid cannot be forged,
    and the reader role can neither write ``scroll_scope`` nor read it.

    The reader role is granted SELECT on ``events`` and ``session_stats`` only: the
    full-text tables, the payloads and the statistics are not open to model SQL (on SQLite
    too ``events_fts`` is refused; ``ms.search`` is the way to full-text search). Row-level
    security binds every role but the tables' owner; the writer role has a policy that
    shows it every row. A login for the reader must be a member of ``scroll_reader`` and of
    nothing more privileged (membership of both would OR the policies).
    """
    _create_role(db, READER_ROLE)
    db.execute(
        f"""
        CREATE TABLE scroll_scope (
            pid INTEGER PRIMARY KEY,
            agents TEXT[] NOT NULL,
            set_at TIMESTAMPTZ NOT NULL DEFAULT now()
        );
        CREATE FUNCTION scroll_scope_agents() RETURNS TEXT[] LANGUAGE sql STABLE
        SECURITY DEFINER SET search_path = {schema}, pg_catalog AS $$
            SELECT coalesce(
                (SELECT agents FROM scroll_scope WHERE pid = pg_backend_pid()), '{{}}'::text[]
            )
        $$;
        REVOKE ALL ON FUNCTION scroll_scope_agents() FROM PUBLIC;
        GRANT EXECUTE ON FUNCTION scroll_scope_agents() TO {READER_ROLE};
        GRANT USAGE ON SCHEMA {schema} TO {READER_ROLE};
        GRANT SELECT ON events, session_stats TO {READER_ROLE};
        GRANT SELECT, INSERT, UPDATE, DELETE ON scroll_scope TO {WRITER_ROLE};
        """
    )
    for table in ("events", "session_stats"):
        db.execute(
            f"""
            ALTER TABLE {table} ENABLE ROW LEVEL SECURITY;
            CREATE POLICY {table}_writer ON {table} TO {WRITER_ROLE} USING (true) WITH CHECK (true);
            CREATE POLICY {table}_reader_scope ON {table} FOR SELECT TO {READER_ROLE}
                USING (agent_id = ANY ((SELECT scroll_scope_agents())::text[]));
            """
        )


def m003_ms_host_reader(db: Any, schema: str) -> None:
    """The role the host's own ``ms`` reads run as (get, range, sessions, search), so that
    the tenant boundary holds where the rows are read and not only in the host's SQL.

    ``scroll_host_reader`` sees ``events`` and ``session_stats`` through the same pid-keyed
    policies as ``scroll_reader``, and ``events_fts`` only for the events it can see (the
    full-text rows carry no agent of their own). It may also read the BM25 statistics,
    which model SQL may not (a lexeme's document count would say whether another agent's
    log holds a word; on SQLite ``events_fts`` is refused to model SQL for the same reason).
    Only host code runs on its connections: the app's login switches to it with SET ROLE
    (``scroll_writer`` is made a member), which model SQL, on its own login, cannot do.
    """
    role = HOST_READER_ROLE
    _create_role(db, role)
    db.execute(
        f"""
        GRANT USAGE ON SCHEMA {schema} TO {role};
        GRANT SELECT ON events, session_stats, events_fts, fts_terms, fts_totals TO {role};
        GRANT EXECUTE ON FUNCTION scroll_scope_agents() TO {role};
        GRANT {role} TO {WRITER_ROLE};
        ALTER TABLE events_fts ENABLE ROW LEVEL SECURITY;
        CREATE POLICY events_fts_writer ON events_fts TO {WRITER_ROLE} USING (true);
        CREATE POLICY events_fts_host_scope ON events_fts FOR SELECT TO {role}
            USING (EXISTS (SELECT 1 FROM events e WHERE e.seq = events_fts.seq));
        """
    )
    for table in ("events", "session_stats"):
        db.execute(
            f"CREATE POLICY {table}_host_scope ON {table} FOR SELECT TO {role} "
            "USING (agent_id = ANY ((SELECT scroll_scope_agents())::text[]))"
        )


def m004_fts_agent_stats(db: Any, schema: str) -> None:
    """BM25's statistics per agent: ``fts_agent_terms`` (documents holding each lexeme, per
    agent) and ``fts_agent_totals`` (documents and tokens, per agent) replace the whole-log
    ``fts_terms`` and ``fts_totals``.

    Counted over the whole log, an agent's scores moved with what other agents had written,
    and an agent could tell from them whether a guessed word was in another agent's memory.
    A search now sums the statistics of the agents it searches (``pg_search``); one that
    names none sums every agent's, which is what the whole-log tables held. The new tables
    are filled from the index as it stands, then kept by the same append trigger (now
    writing them instead of the old ones), guarded like every derived table, and open to the
    host's ``ms`` reader only for the agents its connection may read.
    """
    role = HOST_READER_ROLE
    db.execute(
        f"""
        CREATE TABLE fts_agent_terms (
            agent_id TEXT NOT NULL,
            lexeme TEXT NOT NULL,
            docs BIGINT NOT NULL,
            PRIMARY KEY (agent_id, lexeme)
        );
        CREATE TABLE fts_agent_totals (
            agent_id TEXT PRIMARY KEY,
            docs BIGINT NOT NULL,
            tokens BIGINT NOT NULL
        );
        INSERT INTO fts_agent_terms (agent_id, lexeme, docs)
        SELECT e.agent_id, u.lexeme, count(*)
        FROM events_fts f JOIN events e ON e.seq = f.seq, unnest(f.tsv) AS u
        GROUP BY e.agent_id, u.lexeme;
        INSERT INTO fts_agent_totals (agent_id, docs, tokens)
        SELECT e.agent_id, count(*), coalesce(sum(f.doclen), 0)
        FROM events_fts f JOIN events e ON e.seq = f.seq
        GROUP BY e.agent_id;

        CREATE OR REPLACE FUNCTION scroll_events_appended() RETURNS trigger LANGUAGE plpgsql
        SECURITY DEFINER SET search_path = {schema}, pg_catalog AS $$
        BEGIN
            INSERT INTO session_stats AS s
            SELECT session_id, min(agent_id), count(*), sum(tokens), min(seq), max(seq),
                   min(created_at), max(created_at)
            FROM appended GROUP BY session_id
            ON CONFLICT (session_id) DO UPDATE SET
                agent_id = least(s.agent_id, excluded.agent_id),
                events = s.events + excluded.events,
                tokens = s.tokens + excluded.tokens,
                last_seq = greatest(s.last_seq, excluded.last_seq),
                first_at = least(s.first_at, excluded.first_at),
                last_at = greatest(s.last_at, excluded.last_at);

            WITH owned AS MATERIALIZED (
                SELECT a.seq, a.agent_id, v.tsv,
                       coalesce((SELECT max(p) FROM unnest(v.tsv) AS u, unnest(u.positions) AS p),
                                0) AS doclen
                FROM appended AS a,
                LATERAL (SELECT
                    setweight(to_tsvector('{TS_CONFIG}', a.content), 'D')
                    || setweight(to_tsvector('{TS_CONFIG}', coalesce(a.headline, '')), 'A')
                    || setweight(to_tsvector('{TS_CONFIG}', coalesce(a.name, '')), 'C') AS tsv
                ) AS v
                WHERE a.searchable = 1
            ), indexed AS (
                INSERT INTO events_fts (seq, tsv, doclen) SELECT seq, tsv, doclen FROM owned
            ), terms AS (
                INSERT INTO fts_agent_terms AS t (agent_id, lexeme, docs)
                SELECT o.agent_id, u.lexeme, count(*) FROM owned AS o, unnest(o.tsv) AS u
                GROUP BY o.agent_id, u.lexeme
                ON CONFLICT (agent_id, lexeme) DO UPDATE SET docs = t.docs + excluded.docs
            )
            INSERT INTO fts_agent_totals AS x (agent_id, docs, tokens)
            SELECT agent_id, count(*), coalesce(sum(doclen), 0) FROM owned GROUP BY agent_id
            ON CONFLICT (agent_id) DO UPDATE SET docs = x.docs + excluded.docs,
                                                 tokens = x.tokens + excluded.tokens;
            RETURN NULL;
        END $$;

        DROP TABLE fts_terms, fts_totals;
        """
    )
    for table in ("fts_agent_terms", "fts_agent_totals"):
        db.execute(
            f"""
            CREATE TRIGGER {table}_guard BEFORE INSERT OR UPDATE OR DELETE ON {table}
                FOR EACH ROW EXECUTE FUNCTION scroll_derived_guard();
            CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table}
                FOR EACH STATEMENT EXECUTE FUNCTION scroll_refuse();
            GRANT SELECT ON {table} TO {WRITER_ROLE}, {role};
            ALTER TABLE {table} ENABLE ROW LEVEL SECURITY;
            CREATE POLICY {table}_writer ON {table} TO {WRITER_ROLE} USING (true);
            CREATE POLICY {table}_host_scope ON {table} FOR SELECT TO {role}
                USING (agent_id = ANY ((SELECT scroll_scope_agents())::text[]));
            """
        )


def m005_fts_term_bounds(db: Any, schema: str) -> None:
    """What bounds a lexeme's share of a BM25 score, per agent, beside its document
    frequency in ``fts_agent_terms``: ``max_tf``, the most positions one document holds of
    it; ``min_doclen``, the shortest document holding it; ``labelled``, whether any holds it
    in a headline or a name (the columns weighted other than content).

    ``pg_topk`` stops scoring once no document left can reach the top, and how soon it
    stops is how tight its bound on each lexeme is. Without these a lexeme could give up to
    ``idf * (k1 + 1)``, as if it filled a document of no length; with them its share is at
    most what ``max_tf`` positions (each at the content weight unless ``labelled``) give in a
    document of ``min_doclen``, often half as much, which is below the top for the matches
    of a common word beside a rare one. The log is append-only, so a maximum and a minimum
    kept by the append trigger stay exact. Filled from the index as it stands (the guard
    let through for that one statement), then kept by the same trigger.
    """
    db.execute(
        f"""
        ALTER TABLE fts_agent_terms
            ADD COLUMN max_tf INTEGER NOT NULL DEFAULT 256,
            ADD COLUMN min_doclen INTEGER NOT NULL DEFAULT 0,
            ADD COLUMN labelled BOOLEAN NOT NULL DEFAULT true;
        ALTER TABLE fts_agent_terms DISABLE TRIGGER fts_agent_terms_guard;
        UPDATE fts_agent_terms AS t
        SET max_tf = b.max_tf, min_doclen = b.min_doclen, labelled = b.labelled
        FROM (
            SELECT e.agent_id, u.lexeme, max(cardinality(u.positions)) AS max_tf,
                   min(f.doclen) AS min_doclen,
                   bool_or(NOT u.weights <@ '{{D}}'::text[]) AS labelled
            FROM events_fts f JOIN events e ON e.seq = f.seq, unnest(f.tsv) AS u
            GROUP BY e.agent_id, u.lexeme
        ) AS b
        WHERE t.agent_id = b.agent_id AND t.lexeme = b.lexeme;
        ALTER TABLE fts_agent_terms ENABLE TRIGGER fts_agent_terms_guard;

        CREATE OR REPLACE FUNCTION scroll_events_appended() RETURNS trigger LANGUAGE plpgsql
        SECURITY DEFINER SET search_path = {schema}, pg_catalog AS $$
        BEGIN
            INSERT INTO session_stats AS s
            SELECT session_id, min(agent_id), count(*), sum(tokens), min(seq), max(seq),
                   min(created_at), max(created_at)
            FROM appended GROUP BY session_id
            ON CONFLICT (session_id) DO UPDATE SET
                agent_id = least(s.agent_id, excluded.agent_id),
                events = s.events + excluded.events,
                tokens = s.tokens + excluded.tokens,
                last_seq = greatest(s.last_seq, excluded.last_seq),
                first_at = least(s.first_at, excluded.first_at),
                last_at = greatest(s.last_at, excluded.last_at);

            WITH owned AS MATERIALIZED (
                SELECT a.seq, a.agent_id, v.tsv,
                       coalesce((SELECT max(p) FROM unnest(v.tsv) AS u, unnest(u.positions) AS p),
                                0) AS doclen
                FROM appended AS a,
                LATERAL (SELECT
                    setweight(to_tsvector('{TS_CONFIG}', a.content), 'D')
                    || setweight(to_tsvector('{TS_CONFIG}', coalesce(a.headline, '')), 'A')
                    || setweight(to_tsvector('{TS_CONFIG}', coalesce(a.name, '')), 'C') AS tsv
                ) AS v
                WHERE a.searchable = 1
            ), indexed AS (
                INSERT INTO events_fts (seq, tsv, doclen) SELECT seq, tsv, doclen FROM owned
            ), terms AS (
                INSERT INTO fts_agent_terms AS t
                    (agent_id, lexeme, docs, max_tf, min_doclen, labelled)
                SELECT o.agent_id, u.lexeme, count(*), max(cardinality(u.positions)),
                       min(o.doclen), bool_or(NOT u.weights <@ '{{D}}'::text[])
                FROM owned AS o, unnest(o.tsv) AS u
                GROUP BY o.agent_id, u.lexeme
                ON CONFLICT (agent_id, lexeme) DO UPDATE SET
                    docs = t.docs + excluded.docs,
                    max_tf = greatest(t.max_tf, excluded.max_tf),
                    min_doclen = least(t.min_doclen, excluded.min_doclen),
                    labelled = t.labelled OR excluded.labelled
            )
            INSERT INTO fts_agent_totals AS x (agent_id, docs, tokens)
            SELECT agent_id, count(*), coalesce(sum(doclen), 0) FROM owned GROUP BY agent_id
            ON CONFLICT (agent_id) DO UPDATE SET docs = x.docs + excluded.docs,
                                                 tokens = x.tokens + excluded.tokens;
            RETURN NULL;
        END $$;
        """
    )


# kB of new entries the full-text index holds unmerged (``m006_fts_pending_limit``).
FTS_PENDING_KB = 1024


def m006_fts_pending_limit(db: Any, schema: str) -> None:
    """The GIN index of the full-text table merges its pending list at ``FTS_PENDING_KB``
    (PostgreSQL's default is 4 MB).

    New entries go to the index's pending list and are merged into it when the list passes
    ``gin_pending_list_limit`` or (auto)vacuum runs; until then every search reads the whole
    list. On a live log with the default, each search paid for up to 4 MB of the events
    appended since the last merge: ``bench/pg_pending.py`` (20,000 events, 20 appended before
    each of 300 searches, three rounds) gave a search mean of 10.8 ms and p99 of 35.5 against
    5.3 and 11.7 at 1 MB, with live appends no slower. A smaller list is merged more often,
    at more per entry: a bulk load of 300,000 events in batches of 1,000 ran at 3,823 events
    a second at 1 MB, 3,483 at 256 kB and 4,035 at 4 MB. Chosen on the dev split: the lowest
    search mean among 64 kB, 256 kB, 1 MB and 4 MB whose live and bulk appends are within 10%
    of the default's; reported on the test split (docs/figures-performance.md). Set on the
    index, so it holds for every connection whatever the server's configuration."""
    db.execute(f"ALTER INDEX events_fts_tsv SET (gin_pending_list_limit = {FTS_PENDING_KB})")


MIGRATIONS: list[Migration] = [
    m001_initial,
    m002_ms_reader,
    m003_ms_host_reader,
    m004_fts_agent_stats,
    m005_fts_term_bounds,
    m006_fts_pending_limit,
]


def _applied(db: Any) -> set[str]:
    exists = db.execute("SELECT to_regclass('_scroll_migrations')").fetchone()[0]
    if exists is None:
        return set()
    return {row[0] for row in db.execute("SELECT name FROM _scroll_migrations")}


def migrate(db: Any) -> list[str]:
    """Apply the migrations this database has not seen yet; return their names.

    ``db`` is a psycopg connection in autocommit mode. A role that may only read and append
    (``scroll_writer``) can open a database that is already up to date: nothing is created
    unless something is missing.
    """
    if {m.__name__ for m in MIGRATIONS} <= _applied(db):
        return []
    applied = []
    with db.transaction():
        db.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATE_LOCK,))
        db.execute(
            "CREATE TABLE IF NOT EXISTS _scroll_migrations ("
            " name TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
    schema = db.execute("SELECT current_schema()").fetchone()[0]
    for migration in MIGRATIONS:
        name = migration.__name__
        with db.transaction():
            db.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATE_LOCK,))
            if name in _applied(db):
                continue
            migration(db, schema)
            db.execute("INSERT INTO _scroll_migrations(name) VALUES (%s)", (name,))
        applied.append(name)
    return applied
