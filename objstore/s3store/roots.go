package s3store

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
)

// ErrCAFile marks a CA file (objstore.S3Config.CAFile) that cannot be
// used: unreadable, or not a PEM bundle of certificates. A configuration
// problem, found when the store is built.
var ErrCAFile = errors.New("s3 CA file")

// loadRoots reads a PEM bundle of CA certificates. It is stricter than
// x509.CertPool.AppendCertsFromPEM, which skips what it cannot parse: a
// block that is not a certificate (a key given by mistake), a certificate
// that does not parse, or a file with none fails, naming the file.
func loadRoots(path string) (*x509.CertPool, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCAFile, err)
	}
	pool := x509.NewCertPool()
	n := 0
	for rest := raw; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%w: %s: block %d is a %s, not a CERTIFICATE", ErrCAFile, path, n+1, b.Type)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: certificate %d: %w", ErrCAFile, path, n+1, err)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: %s holds no PEM certificate", ErrCAFile, path)
	}
	return pool, nil
}
