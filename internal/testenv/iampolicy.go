package testenv

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The placeholders of the policies in deploy/iam, which an operator
// replaces (deploy/README.md, "IAM policy"). The check maps every recorded
// bucket onto them: each bucket the tests used stands for one the auditor
// is given.
const (
	PolicyBucket          = "BUCKET_NAME"           // a general-purpose bucket
	PolicyKeyPrefix       = "KEY_PREFIX"            // --key-prefix
	PolicyDirectoryBucket = "DIRECTORY_BUCKET_NAME" // a directory bucket, name--azid--x-s3
	PolicyRegion          = "REGION"
	PolicyAccount         = "ACCOUNT_ID"
)

// sessionModeKey is the condition key of a directory bucket session's mode.
const sessionModeKey = "s3express:SessionMode"

// IAMPolicy is an identity-based IAM policy in the subset deploy/iam's
// policies use: Allow statements of exact actions on resources (ARNs with
// the * and ? wildcards), optionally under StringEquals or StringLike
// conditions. ReadIAMPolicy refuses anything else, so that a policy the
// check cannot evaluate exactly never passes it.
type IAMPolicy struct {
	Version   string
	Statement []IAMStatement
}

// IAMStatement is one statement of an IAMPolicy.
type IAMStatement struct {
	Sid       string
	Effect    string
	Action    stringList
	Resource  stringList
	Condition map[string]map[string]stringList
}

// stringList is a policy element written as one string or a list.
type stringList []string

func (l *stringList) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*l = stringList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("want a string or a list of strings")
	}
	*l = many
	return nil
}

// ReadIAMPolicy reads and validates a policy document.
func ReadIAMPolicy(path string) (IAMPolicy, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return IAMPolicy{}, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields() // NotAction, Principal, ...: not evaluated here
	var p IAMPolicy
	if err := dec.Decode(&p); err != nil {
		return IAMPolicy{}, fmt.Errorf("parse %s: %w", path, err)
	}
	if p.Version != "2012-10-17" {
		return IAMPolicy{}, fmt.Errorf("%s: Version %q, want 2012-10-17", path, p.Version)
	}
	if len(p.Statement) == 0 {
		return IAMPolicy{}, fmt.Errorf("%s: no statement", path)
	}
	for i, st := range p.Statement {
		switch {
		case st.Effect != "Allow":
			return IAMPolicy{}, fmt.Errorf("%s: statement %d (%s): Effect %q, want Allow", path, i, st.Sid, st.Effect)
		case len(st.Action) == 0 || len(st.Resource) == 0:
			return IAMPolicy{}, fmt.Errorf("%s: statement %d (%s): no Action or no Resource", path, i, st.Sid)
		}
		for _, a := range st.Action {
			if strings.ContainsAny(a, "*?") {
				return IAMPolicy{}, fmt.Errorf("%s: statement %d (%s): action %q: a wildcard grants more than is needed", path, i, st.Sid, a)
			}
		}
		for op := range st.Condition {
			if op != "StringEquals" && op != "StringLike" {
				return IAMPolicy{}, fmt.Errorf("%s: statement %d (%s): condition operator %s is not evaluated by the check", path, i, st.Sid, op)
			}
		}
	}
	return p, nil
}

// grantRef is one action on one resource pattern of one statement.
type grantRef struct {
	stmt     int
	action   string
	resource string
}

// allows reports the statement grant that allows action on resource (an
// ARN) with the request context ctx, if any.
func (p IAMPolicy) allows(action, resource string, ctx map[string]string) (grantRef, bool) {
	for i, st := range p.Statement {
		if !slices.Contains(st.Action, action) || !conditionsHold(st.Condition, ctx) {
			continue
		}
		for _, r := range st.Resource {
			if wildMatch(r, resource) {
				return grantRef{i, action, r}, true
			}
		}
	}
	return grantRef{}, false
}

// grants are every action on every resource pattern of the policy.
func (p IAMPolicy) grants() []grantRef {
	var out []grantRef
	for i, st := range p.Statement {
		for _, a := range st.Action {
			for _, r := range st.Resource {
				out = append(out, grantRef{i, a, r})
			}
		}
	}
	return out
}

// conditionsHold evaluates StringEquals and StringLike (ReadIAMPolicy
// admits no other operator): every key must be in the context and match
// one of its values.
func conditionsHold(cond map[string]map[string]stringList, ctx map[string]string) bool {
	for op, keys := range cond {
		for key, values := range keys {
			v, ok := ctx[key]
			if !ok {
				return false
			}
			match := slices.Contains(values, v)
			if op == "StringLike" {
				match = slices.ContainsFunc(values, func(pat string) bool { return wildMatch(pat, v) })
			}
			if !match {
				return false
			}
		}
	}
	return true
}

// wildMatch matches s against an IAM pattern: * any run of characters
// (slashes included), ? any one.
func wildMatch(pattern, s string) bool {
	if pattern == "" {
		return s == ""
	}
	switch pattern[0] {
	case '*':
		for i := 0; i <= len(s); i++ {
			if wildMatch(pattern[1:], s[i:]) {
				return true
			}
		}
		return false
	case '?':
		return s != "" && wildMatch(pattern[1:], s[1:])
	}
	return s != "" && s[0] == pattern[0] && wildMatch(pattern[1:], s[1:])
}

// IAMCheck names the policies a recording is held to.
type IAMCheck struct {
	General   string // the general-purpose buckets' policy (a path)
	Directory string // the directory buckets' policy (a path)
	// KeyPrefix is the key prefix of every store recorded; object
	// resources must sit under the policies' KEY_PREFIX.
	KeyPrefix string
	// Complete says every test that issues requests ran: only then is a
	// grant no recorded call needed an error (else it is logged).
	Complete bool
}

// need is one permission one recorded call needs.
type need struct {
	op       string
	action   string
	resource string
	mode     sessionMode // of an s3express:CreateSession
	example  string      // the call, for messages
}

// CheckIAMPolicies fails t unless both policies allow every permission the
// recorded calls need (the s3ops.go table's rows) and, when c.Complete,
// grant nothing no call needed: no action on a resource pattern no call
// used, no wider session than the calls need. A call the recorder could
// not name fails it too, as does a grant on another bucket or on keys
// outside the key prefix. It logs the operations recorded and the
// actions each policy needed.
func CheckIAMPolicies(t testing.TB, calls map[S3Call]int, c IAMCheck) {
	t.Helper()
	rep, err := checkIAM(calls, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range rep.logs {
		t.Log(l)
	}
	for _, e := range rep.errs {
		t.Error(e)
	}
}

// iamReport is what checkIAM found: errors, and lines to log.
type iamReport struct {
	errs, logs []string
}

func (r *iamReport) errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *iamReport) logf(format string, args ...any) {
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}

func checkIAM(calls map[S3Call]int, c IAMCheck) (*iamReport, error) {
	general, err := ReadIAMPolicy(c.General)
	if err != nil {
		return nil, err
	}
	directory, err := ReadIAMPolicy(c.Directory)
	if err != nil {
		return nil, err
	}
	byName := map[string]*s3Operation{}
	for i := range s3Operations {
		byName[s3Operations[i].Name] = &s3Operations[i]
	}
	rep := &iamReport{}
	ops := map[string]int{}
	var unnamed []string
	var gNeeds, dNeeds []need
	for call, n := range calls {
		op := byName[call.Op]
		if op == nil {
			unnamed = append(unnamed, fmt.Sprintf("%s (%d times)", call.Request, n))
			continue
		}
		ops[call.Op] += n
		g, d := needsOf(call, op, c.KeyPrefix)
		gNeeds, dNeeds = append(gNeeds, g...), append(dNeeds, d...)
	}
	sort.Strings(unnamed)
	for _, u := range unnamed {
		rep.errorf("the S3 recorder could not name %s: add the operation to internal/testenv/s3ops.go with its IAM actions", u)
	}
	names := make([]string, 0, len(ops))
	for name, n := range ops {
		names = append(names, fmt.Sprintf("%s %d", name, n))
	}
	sort.Strings(names)
	rep.logf("S3 operations recorded (requests): %s", strings.Join(names, ", "))
	rep.checkPolicy(c.General, general, gNeeds, c.Complete, map[string]string{
		"another bucket":              "arn:aws:s3:::OTHER_BUCKET",
		"another bucket's objects":    "arn:aws:s3:::OTHER_BUCKET/" + PolicyKeyPrefix + "x",
		"keys outside the key prefix": "arn:aws:s3:::" + PolicyBucket + "/outside-the-prefix",
	})
	rep.checkPolicy(c.Directory, directory, dNeeds, c.Complete, map[string]string{
		"another bucket": "arn:aws:s3express:" + PolicyRegion + ":" + PolicyAccount + ":bucket/OTHER_BUCKET--azid--x-s3",
	})
	return rep, nil
}

// needsOf are the permissions a call needs on a general-purpose bucket
// and on a directory bucket.
func needsOf(c S3Call, op *s3Operation, keyPrefix string) (general, directory []need) {
	example := fmt.Sprintf("%s %s/%s", c.Op, c.Bucket, c.Key)
	if c.Source != "" {
		example += " from " + c.Source
	}
	_, srcKey, _ := strings.Cut(c.Source, "/")
	object := func(key string) string {
		if rest, ok := strings.CutPrefix(key, keyPrefix); ok {
			key = PolicyKeyPrefix + rest
		}
		return "arn:aws:s3:::" + PolicyBucket + "/" + key
	}
	for _, g := range op.General {
		r := "arn:aws:s3:::" + PolicyBucket
		switch g.On {
		case onObject:
			r = object(c.Key)
		case onSource:
			r = object(srcKey)
		}
		general = append(general, need{op: c.Op, action: g.Action, resource: r, example: example})
	}
	for _, g := range op.Directory {
		r := "arn:aws:s3express:" + PolicyRegion + ":" + PolicyAccount + ":bucket/" + PolicyDirectoryBucket
		directory = append(directory, need{op: c.Op, action: g.Action, resource: r, mode: g.Mode, example: example})
	}
	return general, directory
}

// checkPolicy holds one policy to the needs; outside names resources no
// grant may reach.
func (rep *iamReport) checkPolicy(path string, p IAMPolicy, needs []need, complete bool, outside map[string]string) {
	used := map[grantRef]bool{}
	missing := map[string]string{} // what is missing -> an example call
	widest := noSession
	actions := map[string]bool{}
	for _, n := range needs {
		actions[n.action] = true
		widest = max(widest, n.mode)
		ref, ok := p.allows(n.action, n.resource, nil)
		// S3 creates the widest session the policy allows: a wider one
		// than the call needs serves it.
		for m := n.mode; n.mode != noSession && !ok && m <= readWrite; m++ {
			ref, ok = p.allows(n.action, n.resource, map[string]string{sessionModeKey: m.String()})
		}
		if ok {
			used[ref] = true
			continue
		}
		what := fmt.Sprintf("%s needs %s on %s", n.op, n.action, n.resource)
		if n.mode != noSession {
			what += " (a " + n.mode.String() + " session)"
		}
		missing[what] = n.example
	}
	whats := make([]string, 0, len(missing))
	for w := range missing {
		whats = append(whats, w)
	}
	sort.Strings(whats)
	for i, w := range whats {
		if i == 20 {
			rep.errorf("%s: %d more permissions missing", path, len(whats)-i)
			break
		}
		rep.errorf("%s: %s, which no statement allows (as %s)", path, w, missing[w])
	}
	needed := make([]string, 0, len(actions))
	for a := range actions {
		needed = append(needed, a)
	}
	sort.Strings(needed)
	mode := ""
	if widest != noSession {
		mode = " in " + widest.String() + " sessions"
	}
	rep.logf("%s: the recorded calls need %s%s", path, strings.Join(needed, ", "), mode)

	var unused []string
	for _, g := range p.grants() {
		if !used[g] {
			unused = append(unused, fmt.Sprintf("statement %d (%s) grants %s on %s, which no recorded call needed",
				g.stmt, p.Statement[g.stmt].Sid, g.action, g.resource))
		}
	}
	if widest < readWrite {
		for _, st := range p.Statement {
			if slices.Contains(st.Action, "s3express:CreateSession") && conditionsHold(st.Condition, map[string]string{sessionModeKey: readWrite.String()}) {
				unused = append(unused, fmt.Sprintf("statement %s allows ReadWrite sessions; the recorded calls need %s", st.Sid, widest))
			}
		}
	}
	for _, u := range unused {
		if complete {
			rep.errorf("%s: %s", path, u)
		} else {
			rep.logf("%s: %s (not an error: only part of the recording ran)", path, u)
		}
	}
	for what, arn := range outside {
		for _, a := range granted(p) {
			for _, m := range []sessionMode{noSession, readOnly, readWrite} {
				ctx := map[string]string{}
				if m != noSession {
					ctx[sessionModeKey] = m.String()
				}
				if _, ok := p.allows(a, arn, ctx); ok {
					rep.errorf("%s: %s is allowed on %s (%s)", path, a, what, arn)
					break
				}
			}
		}
	}
}

// granted are the policy's actions, each once.
func granted(p IAMPolicy) []string {
	var out []string
	for _, g := range p.grants() {
		if !slices.Contains(out, g.action) {
			out = append(out, g.action)
		}
	}
	return out
}
