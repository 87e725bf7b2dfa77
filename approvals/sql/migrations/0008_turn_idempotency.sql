-- Lead-facing turns are idempotent on (agent, session_id, request_id), like approvals, and a
-- lead is counted by its normalised key (models.lead_key) whatever the spelling of its id.

-- Before this migration a resent turn was recorded again. Those rows are history (the audit is
-- append-only), so they stay: each later copy points at the first row with its ids, and the
-- unique key holds among the rows that are nobody's copy. New rows are never copies.
ALTER TABLE turn_verdicts
    ADD COLUMN lead_key text,
    ADD COLUMN duplicate_of bigint REFERENCES turn_verdicts (id);

UPDATE turn_verdicts AS t SET duplicate_of = first.id
FROM (SELECT agent, session_id, request_id, min(id) AS id
      FROM turn_verdicts GROUP BY agent, session_id, request_id HAVING count(*) > 1) AS first
WHERE (t.agent, t.session_id, t.request_id) = (first.agent, first.session_id, first.request_id)
  AND t.id <> first.id;

CREATE UNIQUE INDEX turn_verdicts_by_request ON turn_verdicts (agent, session_id, request_id)
    WHERE duplicate_of IS NULL;

-- The key of the rows already there, as models.lead_key computes it: NFKC, then an e-mail
-- lower-cased, a phone number as + and its 7 to 15 digits, anything else as given. (Python
-- also maps non-ASCII decimal digits, e.g. Arabic-Indic ones, to ASCII; no rule here does, so
-- an old row spelled that way keeps its id as key. New rows get the key from Python.)
UPDATE turn_verdicts AS t SET lead_key = CASE
        WHEN f.id_ ~ '^[^@\s]{1,64}@[^@\s]{1,255}$' THEN lower(f.id_)
        WHEN f.id_ ~ '^[\s().\-/]*\+?[0-9\s().\-/]+$'
             AND length(regexp_replace(f.id_, '[^0-9]', '', 'g')) BETWEEN 7 AND 15
            THEN '+' || regexp_replace(f.id_, '[^0-9]', '', 'g')
        ELSE t.lead_id
    END
FROM (SELECT id, btrim(normalize(lead_id, NFKC)) AS id_ FROM turn_verdicts) AS f
WHERE f.id = t.id;

ALTER TABLE turn_verdicts ALTER COLUMN lead_key SET NOT NULL;

-- per-lead limits count the allowed calls of one tool for one lead key in a recent window
DROP INDEX turn_verdicts_by_lead;
CREATE INDEX turn_verdicts_by_lead_key ON turn_verdicts (agent, lead_key, tool_name, at)
    WHERE verdict = 'allow';
