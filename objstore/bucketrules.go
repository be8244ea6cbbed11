package objstore

import (
	"fmt"
	"strings"
	"time"
)

// Bucket rules: what a bucket's lifecycle configuration and default
// encryption say, as far as the server tells. The auditor's data must
// never be expired by the bucket (a settle stalled past an expiry would
// lose referenced bytes); the reference setup is exactly one rule,
// AbortIncompleteMultipartUpload after 7 days, and default server-side
// encryption.

// Known says whether the server answered a question.
type Known string

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
	// Note says why something is unknown (the server's answer).
	Note string `json:"note,omitempty"`
}

// UnknownRules is the answer of a store that has no lifecycle or
// encryption (the file backend), or a server that does not implement them.
func UnknownRules(bucket, note string) BucketRules {
	return BucketRules{Bucket: bucket, Lifecycle: KnownUnknown, Rules: []LifecycleRule{}, EncryptionKnown: KnownUnknown, Note: note}
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
	Note       string `json:"note,omitempty"`
}

// Verdict states.
const (
	VerdictYes     = "yes"
	VerdictNo      = "no"
	VerdictUnknown = "unknown"
)

// Judge checks the rules against the prefixes the auditor writes under.
func (b BucketRules) Judge(prefixes []string) RulesVerdict {
	v := RulesVerdict{Bucket: b.Bucket, Expiring: []LifecycleRule{}, AbortIncomplete: VerdictUnknown, Encryption: VerdictUnknown, Note: b.Note}
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
	return v
}
