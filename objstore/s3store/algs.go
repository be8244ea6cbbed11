package s3store

import (
	"context"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/nova/auditor/objstore"
)

// algCacheMax bounds the remembered sources; a full cache starts over.
const algCacheMax = 1 << 14

// algCache remembers the checksum algorithm each pinned source version is
// stored with. Objects are create-once and a pin names one version, so an
// entry never goes stale.
type algCache struct {
	mu sync.Mutex
	m  map[string]objstore.ChecksumAlgorithm
}

func newAlgCache() *algCache { return &algCache{m: map[string]objstore.ChecksumAlgorithm{}} }

// storedAlgorithm reports the algorithm bucket/fullKey is stored with (""
// when HEAD reports none) and its ETag. A source pinned by etag whose HEAD
// shows another version is reported as it stands: the copy's pin fails it.
func (s *Store) storedAlgorithm(ctx context.Context, bucket, fullKey, etag string) (objstore.ChecksumAlgorithm, error) {
	id := bucket + "\x00" + fullKey + "\x00" + etag
	if etag != "" {
		s.algs.mu.Lock()
		a, ok := s.algs.m[id]
		s.algs.mu.Unlock()
		if ok {
			return a, nil
		}
	}
	var alg objstore.ChecksumAlgorithm
	var got string
	err := s.do(ctx, "HeadObject", func(ctx context.Context) error {
		out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: &fullKey, ChecksumMode: types.ChecksumModeEnabled})
		if err != nil {
			return err
		}
		alg, got = headAlgorithm(out), aws.ToString(out.ETag)
		return nil
	})
	if err != nil {
		return "", mapErr(err, nil)
	}
	if etag != "" && got == etag {
		s.algs.mu.Lock()
		if len(s.algs.m) >= algCacheMax {
			clear(s.algs.m)
		}
		s.algs.m[id] = alg
		s.algs.mu.Unlock()
	}
	return alg, nil
}

// headAlgorithm is the algorithm whose checksum a HEAD reports.
func headAlgorithm(out *s3.HeadObjectOutput) objstore.ChecksumAlgorithm {
	switch {
	case out.ChecksumCRC32C != nil:
		return objstore.AlgorithmCRC32C
	case out.ChecksumCRC32 != nil:
		return objstore.AlgorithmCRC32
	case out.ChecksumCRC64NVME != nil:
		return objstore.AlgorithmCRC64NVME
	case out.ChecksumSHA256 != nil:
		return objstore.AlgorithmSHA256
	case out.ChecksumSHA1 != nil:
		return objstore.AlgorithmSHA1
	}
	return ""
}
