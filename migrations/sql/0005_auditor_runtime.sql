-- What the leader of a star runs with, so `auditor status` (run anywhere,
-- with any flags) shows the policy the daemon applies, and what its check
-- of the bucket rules found. Written by the leader under its fencing token
-- when it takes the lease and after each check of the bucket rules.
CREATE TABLE nova.auditor_runtime (
  star          text PRIMARY KEY,
  holder        text NOT NULL,
  token         bigint NOT NULL,
  version       text NOT NULL,
  -- The due policy in seconds: linger and age cap of each class.
  linger_seconds         double precision NOT NULL,
  age_cap_seconds        double precision NOT NULL,
  express_linger_seconds double precision NOT NULL,
  express_age_cap_seconds double precision NOT NULL,
  reap_grace_seconds     double precision NOT NULL,
  -- The last check of the bucket rules (JSON: one document per bucket),
  -- and the reason the leader refuses to work ('' when it works).
  bucket_rules      jsonb,
  bucket_checked_at timestamptz,
  blocked_reason    text NOT NULL DEFAULT '',
  updated_at        timestamptz NOT NULL DEFAULT now()
);
