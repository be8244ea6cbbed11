package objstore

import (
	"fmt"
	"strings"
	"time"
)

// Bucket rules: what a bucket's lifecycle configuration, default
// encryption, versioning and Object Lock configuration say, as far as the
// server tells. The auditor's data must never be expired by the bucket (a
// settle stalled past an expiry would lose referenced bytes); the
// reference setup is exactly one rule, AbortIncompleteMultipartUpload
// after 7 days, and default server-side encryption. And a DELETE must
// remove the bytes: on a bucket with versioning (enabled or suspended) or
// Object Lock it only adds a delete marker and the bytes stay, so an
// erasure could not be applied (docs/architecture.md#erasure).

// Known says whether the server answered a question.
type Known string

// The answers a Known records.
const (
	KnownYes     Known = "yes"     // the server answered
	KnownUnknown Known = "unknown" // it does not implement the call (or the backend has no such thing)
)

// LifecycleRule is one rule of a bucket's lifecycle configuration, in the
// terms that matter here. Prefix is the key prefix of its filter (the
// bucket's full keys, store prefix included); "" is the whole bucket.
type LifecycleRule struct {
	ID      string `json:"id,omitempty"`
	Enabled bool   `json:"enabled"`
	Prefix  string `json:"prefix"`
	// Filtered says the filter has conditions beyond the prefix (tags,
	// sizes); the rule is still taken to reach every key under Prefix.
	Filtered bool `json:"filtered,omitempty"`
	// Expiration: current objects are deleted after ExpirationDays or on
	// ExpirationDate.
	Expiration     bool       `json:"expiration,omitempty"`
	ExpirationDays int32      `json:"expiration_days,omitempty"`
	ExpirationDate *time.Time `json:"expiration_date,omitempty"`
	// AbortIncompleteDays > 0: incomplete multipart uploads are aborted
	// that many days after they start.
	AbortIncompleteDays int32 `json:"abort_incomplete_days,omitempty"`
}

// BucketRules is what a store says of one bucket.
type BucketRules struct {
	Bucket    string          `json:"bucket"`
	Lifecycle Known           `json:"lifecycle"` // unknown: Rules is empty and means nothing
	Rules     []LifecycleRule `json:"rules"`
	// Encryption is the default server-side encryption ("AES256",
	// "aws:kms", ...), "" when none is configured; meaningful only when
	// EncryptionKnown is KnownYes.
	EncryptionKnown Known  `json:"encryption_known"`
	Encryption      string `json:"encryption,omitempty"`
	// Versioning is the bucket's versioning status as S3 says it:
	// "Enabled", "Suspended", or "" when versioning was never enabled
	// (a bucket that had it can only suspend it, never go back);
	// meaningful only when VersioningKnown is KnownYes.
	VersioningKnown Known  `json:"versioning_known"`
	Versioning      string `json:"versioning,omitempty"`
	// ObjectLock says the bucket has an Object Lock configuration;
	// meaningful only when ObjectLockKnown is KnownYes.
	ObjectLockKnown Known `json:"object_lock_known"`
	ObjectLock      bool  `json:"object_lock,omitempty"`
	// Note says why something is unknown (the server's answer).
	Note string `json:"note,omitempty"`
}

// S3's versioning statuses (BucketRules.Versioning).
const (
	VersioningStatusEnabled   = "Enabled"
	VersioningStatusSuspended = "Suspended"
)

// UnknownRules is the answer of a store that cannot say anything of a
// bucket's rules.
func UnknownRules(bucket, note string) BucketRules {
	return BucketRules{Bucket: bucket, Lifecycle: KnownUnknown, Rules: []LifecycleRule{}, EncryptionKnown: KnownUnknown,
		VersioningKnown: KnownUnknown, ObjectLockKnown: KnownUnknown, Note: note}
}

// UnversionedRules is the answer of a store that has no lifecycle rules
// or encryption, and no versioning or Object Lock either: a DELETE removes
// the bytes (the file backend).
func UnversionedRules(bucket, note string) BucketRules {
	r := UnknownRules(bucket, note)
	r.VersioningKnown, r.ObjectLockKnown = KnownYes, KnownYes
	return r
}

// Reaches reports whether the rule can act on a key under any of the
// prefixes: the rule's prefix and one of them are prefixes of one another.
func (r LifecycleRule) Reaches(prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(p, r.Prefix) || strings.HasPrefix(r.Prefix, p) {
			return true
		}
	}
	return false
}

func (r LifecycleRule) String() string {
	name := r.ID
	if name == "" {
		name = "(no id)"
	}
	when := ""
	switch {
	case r.ExpirationDays > 0:
		when = fmt.Sprintf(" after %d days", r.ExpirationDays)
	case r.ExpirationDate != nil:
		when = " on " + r.ExpirationDate.UTC().Format(time.DateOnly)
	}
	return fmt.Sprintf("rule %s: expiration%s over prefix %q", name, when, r.Prefix)
}

// RulesVerdict is a bucket's rules judged against the auditor's prefixes.
type RulesVerdict struct {
	Bucket string `json:"bucket"`
	// Expiring are the enabled expiration rules that reach the auditor's
	// keys: the auditor must not work while there is one.
	Expiring []LifecycleRule `json:"expiring"`
	// AbortIncomplete is yes when an enabled rule aborts incomplete
	// multipart uploads under the auditor's prefixes, no when none does,
	// unknown when the server does not say.
	AbortIncomplete string `json:"abort_incomplete"`
	// Encryption is yes (default encryption on), no, or unknown.
	Encryption string `json:"encryption"`
	// Versioning is enabled, suspended, off (never enabled) or unknown;
	// ObjectLock is yes (an Object Lock configuration), no or unknown.
	// Versioning enabled or suspended, or Object Lock, keeps the bytes a
	// DELETE removes: KeepsDeleted.
	Versioning string `json:"versioning"`
	ObjectLock string `json:"object_lock"`
	Note       string `json:"note,omitempty"`
}

// Verdict states.
const (
	VerdictYes     = "yes"
	VerdictNo      = "no"
	VerdictUnknown = "unknown"
)

// Versioning states of a verdict.
const (
	VersioningEnabled   = "enabled"
	VersioningSuspended = "suspended"
	VersioningOff       = "off" // never enabled
)

// KeepsDeleted reports whether a DELETE on the bucket may leave the bytes
// in place: yes with versioning enabled or suspended (a delete marker
// hides the object, its versions stay; a suspended bucket keeps the
// versions it made while enabled) or an Object Lock configuration; no
// when versioning is known never to have been enabled (S3 has Object Lock
// only on versioned buckets, so an unanswered Object Lock question does
// not change that); unknown when the server does not say. A verdict
// recorded before these checks existed has neither field: unknown.
func (v RulesVerdict) KeepsDeleted() string {
	switch {
	case v.Versioned() || v.ObjectLock == VerdictYes:
		return VerdictYes
	case v.Versioning == VersioningOff:
		return VerdictNo
	}
	return VerdictUnknown
}

// Versioned reports whether the bucket has had versioning: enabled or
// suspended (the versions made while it was enabled stay).
func (v RulesVerdict) Versioned() bool {
	return v.Versioning == VersioningEnabled || v.Versioning == VersioningSuspended
}

// KeepsDeletedWhy names what keeps deleted bytes on the bucket ("" when
// nothing known does): "versioning enabled", "Object Lock", or both.
func (v RulesVerdict) KeepsDeletedWhy() string {
	var why []string
	if v.Versioned() {
		why = append(why, "versioning "+v.Versioning)
	}
	if v.ObjectLock == VerdictYes {
		why = append(why, "Object Lock")
	}
	return strings.Join(why, " and ")
}

// Judge checks the rules against the prefixes the auditor writes under.
func (b BucketRules) Judge(prefixes []string) RulesVerdict {
	v := RulesVerdict{Bucket: b.Bucket, Expiring: []LifecycleRule{}, AbortIncomplete: VerdictUnknown, Encryption: VerdictUnknown,
		Versioning: VerdictUnknown, ObjectLock: VerdictUnknown, Note: b.Note}
	if b.Lifecycle == KnownYes {
		v.AbortIncomplete = VerdictNo
		for _, r := range b.Rules {
			if !r.Enabled || !r.Reaches(prefixes) {
				continue
			}
			if r.Expiration {
				v.Expiring = append(v.Expiring, r)
			}
			if r.AbortIncompleteDays > 0 {
				v.AbortIncomplete = VerdictYes
			}
		}
	}
	if b.EncryptionKnown == KnownYes {
		v.Encryption = VerdictNo
		if b.Encryption != "" {
			v.Encryption = VerdictYes
		}
	}
	if b.VersioningKnown == KnownYes {
		switch b.Versioning {
		case "":
			v.Versioning = VersioningOff
		case VersioningStatusSuspended:
			v.Versioning = VersioningSuspended
		case VersioningStatusEnabled:
			v.Versioning = VersioningEnabled
		default: // a status this code does not know: taken as on
			v.Versioning = VersioningEnabled
		}
	}
	if b.ObjectLockKnown == KnownYes {
		v.ObjectLock = VerdictNo
		if b.ObjectLock {
			v.ObjectLock = VerdictYes
		}
	}
	return v
}
