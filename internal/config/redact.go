package config

import (
	"net/url"
	"strings"
)

// redacted replaces a secret in what is printed.
const redacted = "xxxxx"

// secretParam reports whether a connection parameter holds a secret: the
// password, and the passphrase of an encrypted client key (sslpassword).
// The other TLS parameters (sslmode, sslrootcert, sslcert, sslkey) name
// files and modes, and are shown.
func secretParam(name string) bool { return name == "password" || name == "sslpassword" }

// isURL reports whether a database setting is a URL (scheme://...)
// rather than a key=value DSN. Any scheme counts, not only postgres and
// postgresql: a URL of another (mysql://u:pw@h/x) is refused, and the
// refusal must not show its password either.
func isURL(s string) bool {
	scheme, _, ok := strings.Cut(s, "://")
	if !ok || scheme == "" {
		return false
	}
	for i, r := range scheme {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z':
		case i > 0 && ('0' <= r && r <= '9' || r == '+' || r == '-' || r == '.'):
		default:
			return false
		}
	}
	return true
}

// RedactURL hides the secrets of a database URL or key=value DSN: the
// password, in the user info or as a parameter, and sslpassword. A URL
// that does not parse shows only its scheme and host part.
func RedactURL(u string) string {
	if !isURL(u) {
		return redactDSN(u)
	}
	p, err := url.Parse(u)
	if err != nil {
		scheme, rest, _ := strings.Cut(u, "://")
		rest, _, _ = strings.Cut(rest, "?")
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			rest = redacted + rest[at:]
		}
		return scheme + "://" + rest + " (does not parse; parameters hidden)"
	}
	if p.User != nil {
		if _, has := p.User.Password(); has {
			p.User = url.UserPassword(p.User.Username(), redacted)
		}
	}
	q := p.Query()
	hidden := false
	for k := range q {
		if secretParam(k) {
			q[k] = []string{redacted}
			hidden = true
		}
	}
	if hidden {
		p.RawQuery = q.Encode()
	}
	return p.String()
}

// dsnPair is one key=value of a DSN; [from, to) is the value's span in
// the DSN, quotes included.
type dsnPair struct {
	key, value string
	from, to   int
}

// dsnPairs splits a key=value DSN the way libpq does: spaces around '=',
// values bare or single-quoted with backslash escapes. It stops at the
// first thing that is not a pair.
func dsnPairs(s string) []dsnPair {
	var out []dsnPair
	i := 0
	skip := func() {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
			i++
		}
	}
	for {
		skip()
		k := i
		for i < len(s) && s[i] != '=' && s[i] != ' ' && s[i] != '\t' {
			i++
		}
		key := s[k:i]
		skip()
		if key == "" || i >= len(s) || s[i] != '=' {
			return out
		}
		i++
		skip()
		from := i
		var val strings.Builder
		if i < len(s) && s[i] == '\'' {
			i++
			for i < len(s) && s[i] != '\'' {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				val.WriteByte(s[i])
				i++
			}
			if i < len(s) {
				i++ // the closing quote
			}
		} else {
			for i < len(s) && s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r' {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				val.WriteByte(s[i])
				i++
			}
		}
		out = append(out, dsnPair{key: key, value: val.String(), from: from, to: i})
	}
}

// redactDSN hides a DSN's secret values.
func redactDSN(s string) string {
	pairs := dsnPairs(s)
	for i := len(pairs) - 1; i >= 0; i-- {
		if p := pairs[i]; secretParam(p.key) {
			s = s[:p.from] + redacted + s[p.to:]
		}
	}
	return s
}

// secrets are the database setting's secret values (password and
// sslpassword, wherever given), so error text can be scrubbed of them.
func (c Config) secrets() []string {
	var out []string
	if isURL(c.DatabaseURL) {
		p, err := url.Parse(c.DatabaseURL)
		if err != nil {
			// as written: the user info's password and the secret
			// parameters' values
			_, rest, _ := strings.Cut(c.DatabaseURL, "://")
			rest, query, _ := strings.Cut(rest, "?")
			if at := strings.LastIndex(rest, "@"); at >= 0 {
				if _, pw, ok := strings.Cut(rest[:at], ":"); ok && pw != "" {
					out = append(out, pw)
				}
			}
			for _, kv := range strings.Split(query, "&") {
				if k, v, _ := strings.Cut(kv, "="); secretParam(k) && v != "" {
					out = append(out, v)
				}
			}
			return out
		}
		if pw, ok := p.User.Password(); ok && pw != "" {
			out = append(out, pw)
		}
		for k, vs := range p.Query() {
			for _, v := range vs {
				if secretParam(k) && v != "" {
					out = append(out, v)
				}
			}
		}
		return out
	}
	for _, p := range dsnPairs(c.DatabaseURL) {
		if secretParam(p.key) && p.value != "" {
			out = append(out, p.value)
		}
	}
	return out
}

// Password returns the database URL's password, so error text can be scrubbed.
func (c Config) Password() string {
	if isURL(c.DatabaseURL) {
		if p, err := url.Parse(c.DatabaseURL); err == nil {
			if pw, ok := p.User.Password(); ok {
				return pw
			}
			return p.Query().Get("password")
		}
		return ""
	}
	for _, p := range dsnPairs(c.DatabaseURL) {
		if p.key == "password" {
			return p.value
		}
	}
	return ""
}

// Scrub removes the configuration's secrets from a message.
func (c Config) Scrub(msg string) string {
	for _, s := range c.secrets() {
		msg = strings.ReplaceAll(msg, s, redacted)
	}
	return msg
}
