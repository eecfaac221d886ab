-- POP's history tables partitioned by month: the first step past one PostgreSQL primary
-- (docs/capacity.md §4, step 1), as a schema beside the live one.
--
-- Run it on a migrated POP database:   psql "$DATABASE_URL" -f deploy/postgresql/partitioned-history.sql
-- It creates the schema `pop_history` and touches nothing of POP's own tables. POP does not read
-- or write `pop_history`: this is the rehearsal of the step (its keys, its partitions, what a
-- month's reap costs as a DROP), measured by `python -m bench.partitions` and checked by
-- tests/agendas/test_partitioned_history.py. Running it again changes nothing.
--
-- The four history tables get a twin each, with the live table's columns and checks
-- (CREATE TABLE … LIKE, so the twin follows the migrations it is built after):
--
--   pop_history.agenda             partitioned by created_at
--   pop_history.agendaprogress     \
--   pop_history.operationprogress   > each row carries its agenda's created_at (agenda_created_at)
--   pop_history.execution          /  and is partitioned by it
--
-- Every row of an agenda's history shares one partition key, so one agenda's rows live in one
-- month's partitions however long its retries take, and the unique keys keep their meaning with
-- the key appended: (id, t), (agenda_id, t), (agenda_progress_id, name, t), (agenda_id, number, t)
-- — an agenda has one creation time. The idempotency key, unique per customer across all time,
-- cannot be a key of a partitioned table; it lives in pop_history.idempotency_key, a plain table
-- reaped with its agenda. Every other index of the live tables is copied as it is.
--
-- Partitions are made and dropped by month:
--   SELECT pop_history.month_add('2026-11-01');    -- the four tables' partitions of a month
--   SELECT * FROM pop_history.month_partitions('2026-11-01');  -- their names and bounds
--   SELECT pop_history.month_drop('2026-08-01');   -- detach and drop them: a month's reap
--   SELECT pop_history.copy_from_live('2026-11-01', '2026-12-01');  -- live rows of agendas
--                                                   -- created in [from, until), for rehearsal
-- A month may be dropped once every customer's TTL has passed over it (the longest TTL); a
-- customer with a shorter one is reaped inside the partition by the set-based delete POP runs
-- today.

CREATE SCHEMA IF NOT EXISTS pop_history;

CREATE TABLE IF NOT EXISTS pop_history.agenda
    (LIKE public.agendas_agenda INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE)
    PARTITION BY RANGE (created_at);
CREATE TABLE IF NOT EXISTS pop_history.agendaprogress
    (LIKE public.agendas_agendaprogress INCLUDING DEFAULTS INCLUDING CONSTRAINTS
     INCLUDING STORAGE, agenda_created_at timestamptz NOT NULL)
    PARTITION BY RANGE (agenda_created_at);
CREATE TABLE IF NOT EXISTS pop_history.operationprogress
    (LIKE public.agendas_operationprogress INCLUDING DEFAULTS INCLUDING CONSTRAINTS
     INCLUDING STORAGE, agenda_created_at timestamptz NOT NULL)
    PARTITION BY RANGE (agenda_created_at);
CREATE TABLE IF NOT EXISTS pop_history.execution
    (LIKE public.agendas_execution INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE,
     agenda_created_at timestamptz NOT NULL)
    PARTITION BY RANGE (agenda_created_at);

-- The idempotency keys, with the live columns' types.
CREATE TABLE IF NOT EXISTS pop_history.idempotency_key AS
    SELECT customer_id, idempotency_key, id AS agenda_id, created_at AS agenda_created_at
    FROM public.agendas_agenda WITH NO DATA;
ALTER TABLE pop_history.idempotency_key
    ALTER customer_id SET NOT NULL, ALTER idempotency_key SET NOT NULL,
    ALTER agenda_id SET NOT NULL, ALTER agenda_created_at SET NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS idempotency_key_key
    ON pop_history.idempotency_key (customer_id, idempotency_key);
CREATE INDEX IF NOT EXISTS idempotency_key_agenda
    ON pop_history.idempotency_key (agenda_created_at, agenda_id);

-- The unique keys, each with the partition key appended.
CREATE UNIQUE INDEX IF NOT EXISTS agenda_key ON pop_history.agenda (id, created_at);
CREATE UNIQUE INDEX IF NOT EXISTS agendaprogress_key
    ON pop_history.agendaprogress (id, agenda_created_at);
CREATE UNIQUE INDEX IF NOT EXISTS agendaprogress_agenda_key
    ON pop_history.agendaprogress (agenda_id, agenda_created_at);
CREATE UNIQUE INDEX IF NOT EXISTS operationprogress_key
    ON pop_history.operationprogress (id, agenda_created_at);
CREATE UNIQUE INDEX IF NOT EXISTS operationprogress_name_key
    ON pop_history.operationprogress (agenda_progress_id, name, agenda_created_at);
CREATE UNIQUE INDEX IF NOT EXISTS execution_key ON pop_history.execution (id, agenda_created_at);
CREATE UNIQUE INDEX IF NOT EXISTS execution_number_key
    ON pop_history.execution (agenda_id, number, agenda_created_at);

-- Every other index of the live tables, as it is (the unique ones are the keys above; the
-- idempotency key's is its own table's).
DO $copy_indexes$
DECLARE
    live record;
    twin text;
    definition text;
BEGIN
    FOR live IN
        SELECT c.relname AS live_table, i.relname AS index_name,
               pg_get_indexdef(x.indexrelid) AS definition
        FROM pg_index x
        JOIN pg_class c ON c.oid = x.indrelid
        JOIN pg_class i ON i.oid = x.indexrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public'
          AND c.relname IN ('agendas_agenda', 'agendas_agendaprogress',
                            'agendas_operationprogress', 'agendas_execution')
          AND NOT x.indisunique
    LOOP
        twin := 'pop_history.' || substr(live.live_table, length('agendas_') + 1);
        definition := regexp_replace(
            live.definition,
            '^CREATE INDEX \S+ ON public\.' || live.live_table || ' ',
            'CREATE INDEX IF NOT EXISTS ' || quote_ident('history_' || live.index_name)
                || ' ON ' || twin || ' '
        );
        IF definition = live.definition THEN
            RAISE EXCEPTION 'index % of % has an unexpected definition: %',
                live.index_name, live.live_table, live.definition;
        END IF;
        EXECUTE definition;
    END LOOP;
END
$copy_indexes$;

-- The four tables' partitions of the month that holds `month`: each parent table, its
-- partition's name and the month's bounds [first, next).
CREATE OR REPLACE FUNCTION pop_history.month_partitions(month date)
RETURNS TABLE (parent text, partition text, first date, next date)
LANGUAGE sql STABLE AS $month_partitions$
    SELECT t.parent, t.parent || '_' || to_char(m.first, '"y"YYYY"m"MM'), m.first,
           (m.first + interval '1 month')::date
    FROM (SELECT date_trunc('month', month)::date AS first) AS m,
         unnest(ARRAY['agenda', 'agendaprogress', 'operationprogress', 'execution'])
             AS t(parent)
$month_partitions$;

-- Make the four tables' partitions of the month that holds `month`.
CREATE OR REPLACE FUNCTION pop_history.month_add(month date) RETURNS void
LANGUAGE plpgsql AS $month_add$
DECLARE
    p record;
BEGIN
    FOR p IN SELECT * FROM pop_history.month_partitions(month) LOOP
        EXECUTE format(
            'CREATE TABLE IF NOT EXISTS pop_history.%I PARTITION OF pop_history.%I '
            'FOR VALUES FROM (%L) TO (%L)',
            p.partition, p.parent, p.first, p.next
        );
    END LOOP;
END
$month_add$;

-- A month's reap: detach and drop the four tables' partitions of the month that holds
-- `month`, and the idempotency keys of its agendas. Returns the number of agendas dropped.
CREATE OR REPLACE FUNCTION pop_history.month_drop(month date) RETURNS bigint
LANGUAGE plpgsql AS $month_drop$
DECLARE
    p record;
    dropped bigint := 0;
BEGIN
    FOR p IN SELECT * FROM pop_history.month_partitions(month) LOOP
        IF to_regclass(format('pop_history.%I', p.partition)) IS NULL THEN
            RETURN 0;  -- never made, or dropped already
        END IF;
        IF p.parent = 'agenda' THEN
            EXECUTE format('SELECT count(*) FROM pop_history.%I', p.partition) INTO dropped;
            DELETE FROM pop_history.idempotency_key
            WHERE agenda_created_at >= p.first AND agenda_created_at < p.next;
        END IF;
        EXECUTE format('ALTER TABLE pop_history.%I DETACH PARTITION pop_history.%I',
                       p.parent, p.partition);
        EXECUTE format('DROP TABLE pop_history.%I', p.partition);
    END LOOP;
    RETURN dropped;
END
$month_drop$;

-- Copy the live history of the agendas created in [since, until) into pop_history, making the
-- months' partitions it needs. Returns the number of agendas copied.
CREATE OR REPLACE FUNCTION pop_history.copy_from_live(since timestamptz, until timestamptz)
RETURNS bigint
LANGUAGE plpgsql AS $copy_from_live$
DECLARE
    month date := date_trunc('month', since)::date;
    copied bigint;
BEGIN
    WHILE month < until LOOP
        PERFORM pop_history.month_add(month);
        month := (month + interval '1 month')::date;
    END LOOP;
    INSERT INTO pop_history.agenda
    SELECT a.* FROM public.agendas_agenda a WHERE a.created_at >= since AND a.created_at < until;
    GET DIAGNOSTICS copied = ROW_COUNT;
    INSERT INTO pop_history.agendaprogress
    SELECT p.*, a.created_at
    FROM public.agendas_agendaprogress p JOIN public.agendas_agenda a ON a.id = p.agenda_id
    WHERE a.created_at >= since AND a.created_at < until;
    INSERT INTO pop_history.operationprogress
    SELECT o.*, a.created_at
    FROM public.agendas_operationprogress o
    JOIN public.agendas_agendaprogress p ON p.id = o.agenda_progress_id
    JOIN public.agendas_agenda a ON a.id = p.agenda_id
    WHERE a.created_at >= since AND a.created_at < until;
    INSERT INTO pop_history.execution
    SELECT e.*, a.created_at
    FROM public.agendas_execution e JOIN public.agendas_agenda a ON a.id = e.agenda_id
    WHERE a.created_at >= since AND a.created_at < until;
    INSERT INTO pop_history.idempotency_key
    SELECT a.customer_id, a.idempotency_key, a.id, a.created_at
    FROM public.agendas_agenda a
    WHERE a.created_at >= since AND a.created_at < until AND a.idempotency_key <> '';
    RETURN copied;
END
$copy_from_live$;
