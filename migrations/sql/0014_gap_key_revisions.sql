-- Headroom migration 0007's backfill missed: revision 0 of the key bases
-- where a new run may start inside a retention gap
-- (docs/architecture.md#no-late-delete).
--
-- When retention has raised a stream's low_record past its
-- settled_through, settle starts the next run at the first live chunk,
-- the one that holds record low_record, which may start above
-- settled_through (up to low_record: what resolve and CommitSettle allow).
-- An auditor from before 0007 may have opened such a base at revision 0,
-- condemned or given up the key and sent its DELETE, and finished the
-- intent: no trace is left. 0007 kept revision 0 only at settled_through,
-- so without this a binary with 0007 could publish that key again while
-- the DELETE is still in flight.
--
-- What the headroom covers: every such base the auditor can still reach.
-- low_record and settled_through only grow, a new run above
-- settled_through starts at the first live chunk (which ends past
-- low_record), and the old binary opened its base at or below the
-- low_record of its time, so the base is the start of the chunk holding
-- the stream's low_record now. That chunk lies in the span ref holding
-- low_record; where in the ref only the slots' footers say, so every
-- record of that ref above settled_through and up to low_record gets
-- revision 0 reserved: the ref's first record alone when it names one
-- slot (one chunk). A reserved record that starts no chunk is never
-- opened; it costs a row (at most one ref's records per stream in a gap).
-- Bases at settled_through are 0007's; an existing row holds a revision
-- at or above 0 already and is left as it is.
INSERT INTO nova.auditor_key_revisions (stream_id, epoch, first_record, high_revision)
SELECT s.stream_id, s.epoch, b.first_record, 0
FROM nova.streams s
JOIN nova.span_refs r ON r.stream_id = s.stream_id
  AND r.first_record <= s.low_record AND s.low_record < r.first_record + r.record_count
CROSS JOIN LATERAL generate_series(greatest(r.first_record, s.settled_through + 1),
  CASE WHEN cardinality(r.slot_seqs) = 1 THEN r.first_record ELSE s.low_record END) AS b(first_record)
WHERE s.settled_through < s.low_record
ORDER BY 1, 2, 3
ON CONFLICT (stream_id, epoch, first_record) DO NOTHING;
