-- One fleet for every star (docs/architecture.md#the-fleet): the members
-- of `auditor serve --stars ...`, the hand-off of a star from one member to
-- the next, and the record of every move. The per-star lease row and its
-- fencing token are unchanged: safety never depends on these tables.

-- A member is one serving process: member is its stable identity (its
-- --holder, the pod name in the fleet example), instance the nonce the
-- process draws at start. It is alive while expires_at (the database's
-- clock) is ahead; draining members are handing their stars off and claim
-- none.
CREATE TABLE nova.auditor_members (
  member       text PRIMARY KEY CHECK (member <> ''),
  instance     text NOT NULL,
  started_at   timestamptz NOT NULL DEFAULT now(),
  heartbeat_at timestamptz NOT NULL DEFAULT now(),
  expires_at   timestamptz NOT NULL,
  draining     boolean NOT NULL DEFAULT false,
  stars        text NOT NULL DEFAULT 'all'   -- the member's --stars, for status
);

-- When a holder gives a lease up on purpose it says why (released_why:
-- drain, balance, stuck, or released for a plain exit) and when
-- (released_at); handoff_to names the member it handed the star to (a
-- drain or a balance move): that member claims it at once, beyond its cap,
-- and the others leave it to it for a short while. A fleet member inserts
-- a row for a star that never had one (holder '', token 0, expired at
-- once), so that how long a star went unowned is always known.
ALTER TABLE nova.auditor_leases
  ADD COLUMN handoff_to   text,
  ADD COLUMN released_at  timestamptz,
  ADD COLUMN released_why text CHECK (released_why IN ('released', 'drain', 'balance', 'stuck'));

-- One row per claim of a star by a fleet member: from whom (NULL: never
-- owned), to whom, why it left its last owner (new: it had none; released,
-- drain, balance, stuck: given up, as released_why says; lost: its owner's
-- lease expired unrenewed, a dead or stopped process), and whether the
-- claim went beyond the claimer's cap (the liveness rule, or a hand-off).
-- The balance reads it for its cooldown and the fleet-wide move budget,
-- status --fleet shows the recent ones. Members prune rows older than a
-- day.
CREATE TABLE nova.auditor_fleet_moves (
  id          bigserial PRIMARY KEY,
  at          timestamptz NOT NULL DEFAULT now(),
  star        text NOT NULL,
  from_member text,             -- NULL: never owned
  to_member   text NOT NULL,
  reason      text NOT NULL CHECK (reason IN ('new', 'released', 'drain', 'balance', 'stuck', 'lost')),
  over_cap    boolean NOT NULL DEFAULT false,
  unowned_ms  bigint NOT NULL DEFAULT 0,  -- how long the star had no live owner
  token       bigint NOT NULL           -- the fencing token the new owner got
);
CREATE INDEX auditor_fleet_moves_at ON nova.auditor_fleet_moves (at);
CREATE INDEX auditor_fleet_moves_star_at ON nova.auditor_fleet_moves (star, at);
