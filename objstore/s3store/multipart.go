package s3store

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"golang.org/x/sync/errgroup"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/objstore"
)

// partState is what one part ends as.
type partState struct {
	etag   string
	crc    uint32
	hasCRC bool // confirmed by the server or computed from the bytes
}

// completeTries bounds the passes of a multipart assembly whose complete
// is refused with InvalidPart (a part replaced after it was made: below).
const completeTries = 3

func (a *assembly) multipart(ctx context.Context) error {
	existing := map[int]objstore.PartInfo{}
	if a.uploadID == "" {
		if a.mode == objstore.ChecksumBySource {
			a.mode = a.chooseMode(ctx)
		}
		if err := a.create(ctx); err != nil {
			return err
		}
	} else {
		var err error
		if existing, err = a.listExisting(ctx); err != nil {
			return err
		}
	}
	// A part request of an earlier attempt (a process that died or was
	// paused, its requests already sent) may land after this pass made
	// the part, replacing it with another plan's bytes; the complete then
	// names an ETag the upload no longer holds, and the server refuses it
	// (InvalidPart) before anything is published. The parts are listed
	// again and every part not this plan's is made again; each late
	// request lands once, so a few passes settle it.
	for try := 1; ; try++ {
		err := a.parts(ctx, existing)
		if err == nil {
			break
		}
		if errorCode(err) != "InvalidPart" || try == completeTries {
			return err
		}
		if existing, err = a.listExisting(ctx); err != nil {
			return err
		}
	}
	a.checked = a.mode == objstore.ChecksumFullObject && a.fullKnown
	if a.mode == objstore.ChecksumParts && a.s.cfg.VerifyReadback && a.req.HasExpectedCRC32C {
		if err := a.readBack(ctx); err != nil {
			return err
		}
	}
	return a.hook(a.req.Hooks.CallCompleted)
}

// listExisting lists the parts a resumed upload holds, by number, and
// takes the upload's checksum mode from it.
func (a *assembly) listExisting(ctx context.Context) (map[int]objstore.PartInfo, error) {
	parts, ctype, err := a.s.listParts(ctx, a.req.Bucket, a.req.Key, a.uploadID)
	if err != nil {
		return nil, err
	}
	a.mode = objstore.ChecksumParts
	if ctype == types.ChecksumTypeFullObject {
		a.mode = objstore.ChecksumFullObject
	}
	existing := make(map[int]objstore.PartInfo, len(parts))
	for _, p := range parts {
		existing[p.Number] = p
	}
	return existing, nil
}

// parts makes every part of the plan present in the upload (keeping what
// existing holds of it), checks that their CRCs combine to the expected
// one, and completes the upload.
func (a *assembly) parts(ctx context.Context, existing map[int]objstore.PartInfo) error {
	states := make([]partState, len(a.plan.Parts))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(a.s.cfg.CopyConcurrency)
	gatherSem := make(chan struct{}, gatherInFlight)
	for i, part := range a.plan.Parts {
		have, resumed := existing[part.Number]
		g.Go(func() error {
			st, err := a.doPart(gctx, part, have, resumed, gatherSem)
			if err != nil {
				return fmt.Errorf("part %d: %w", part.Number, err)
			}
			states[i] = st
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	// The parts' CRCs, where the server confirmed them or we computed
	// them, must combine to the expected one before anything is published.
	full, fullKnown := uint32(0), true
	for i, st := range states {
		fullKnown = fullKnown && st.hasCRC
		full = bundlefmt.CombineCRC32C(full, st.crc, a.plan.Parts[i].Size)
	}
	if a.req.HasExpectedCRC32C {
		if fullKnown && full != a.req.ExpectedCRC32C {
			return fmt.Errorf("parts combine to CRC %08x, expected %08x: %w", full, a.req.ExpectedCRC32C, objstore.ErrChecksum)
		}
		full, fullKnown = a.req.ExpectedCRC32C, true
	}
	a.fullKnown = fullKnown
	return a.complete(ctx, states, full, fullKnown)
}

// chooseMode decides a new upload's checksum mode under ChecksumBySource:
// full object when every source the plan copies server side is stored
// with an algorithm the server computes ranged copies' CRC-32C for (HEAD,
// remembered per pinned version), else per-part checksums and a read-back.
// A source HEAD cannot see is left to its copy to report; the assembly is
// then read back.
func (a *assembly) chooseMode(ctx context.Context) objstore.ChecksumMode {
	seen := map[[3]string]bool{}
	for _, part := range a.plan.Parts {
		if !part.Copy {
			continue
		}
		p := a.pieces[part.Segments[0].Piece]
		id := [3]string{p.SrcBucket, p.SrcKey, p.SrcETag}
		if seen[id] {
			continue
		}
		seen[id] = true
		alg, err := a.s.storedAlgorithm(ctx, p.SrcBucket, a.s.cfg.KeyPrefix+p.SrcKey, p.SrcETag)
		if err != nil || !slices.Contains(a.s.cfg.ServerChecked, alg) {
			return objstore.ChecksumParts
		}
	}
	return objstore.ChecksumFullObject
}

func (a *assembly) create(ctx context.Context) error {
	in := &s3.CreateMultipartUploadInput{Bucket: &a.req.Bucket, Key: &a.fullKey}
	if a.mode == objstore.ChecksumFullObject {
		in.ChecksumAlgorithm = types.ChecksumAlgorithmCrc32c
		in.ChecksumType = types.ChecksumTypeFullObject
	}
	err := a.s.do(ctx, "CreateMultipartUpload", func(ctx context.Context) error {
		out, err := a.s.client.CreateMultipartUpload(ctx, in)
		if err == nil {
			a.uploadID = aws.ToString(out.UploadId)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("create upload: %w", mapErr(err, nil))
	}
	if err := a.hook(func() error { return a.req.Hooks.CallUploadCreated(a.uploadID) }); err != nil {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if aerr := a.s.AbortAssembly(actx, a.req.Bucket, a.req.Key, a.uploadID); aerr != nil {
			return errors.Join(err, aerr)
		}
		a.uploadID = ""
		return err
	}
	return nil
}

// doPart makes one part present in the upload: kept if a resumed upload
// already holds it with the planned size and checksum, else copied,
// uploaded from the stager, or rebuilt from source.
//
// A resumed upload may have been built, and its parts staged, for another
// plan of the same key (a publish intent reopened after more was absorbed,
// or under other erasures): a part of the right size is not proof. So a
// part the upload holds is kept only when its bytes are shown to be this
// plan's part (its CRC-32C, as the server reports it, is the one the plan
// expects, or it matches the bytes gathered for it), and a staged part is
// used only when its length and CRC-32C are the plan's. A part the plan
// knows no CRC for without its bytes (a source range split between
// parts) is copied again, or gathered again from source; a stale sidecar
// is replaced, never uploaded.
func (a *assembly) doPart(ctx context.Context, part objstore.Part, have objstore.PartInfo, resumed bool, gatherSem chan struct{}) (partState, error) {
	exp, expKnown := a.expectedCRC(part)
	fits := resumed && have.Size == part.Size
	keep := partState{etag: have.ETag, crc: have.CRC32C, hasCRC: have.HasCRC32C}
	if part.Copy {
		if fits && expKnown && have.HasCRC32C && have.CRC32C == exp {
			return keep, nil
		}
		st, err := a.copyPart(ctx, part)
		if err != nil {
			return st, err
		}
		if expKnown && st.hasCRC && st.crc != exp {
			return st, fmt.Errorf("server reports CRC %08x for the copy, source range expected %08x: %w", st.crc, exp, objstore.ErrChecksum)
		}
		return st, a.hook(func() error { return a.req.Hooks.CallPartDone(part.Number, true) })
	}
	if fits && expKnown && have.HasCRC32C && have.CRC32C == exp {
		return keep, nil
	}
	select {
	case gatherSem <- struct{}{}:
	case <-ctx.Done():
		return partState{}, ctx.Err()
	}
	defer func() { <-gatherSem }()
	var data []byte
	staged := false
	if a.req.UploadID != "" && a.req.Stager != nil && expKnown {
		if d, err := a.req.Stager.Load(part.Number); err == nil && int64(len(d)) == part.Size && bundlefmt.CRC32C(d) == exp {
			data, staged = d, true
		}
	}
	if data == nil {
		var err error
		if data, err = a.gather(ctx, part); err != nil {
			return partState{}, err
		}
	}
	crc := bundlefmt.CRC32C(data)
	if expKnown && crc != exp {
		return partState{}, fmt.Errorf("gathered CRC %08x, expected %08x: %w", crc, exp, objstore.ErrChecksum)
	}
	st := partState{crc: crc, hasCRC: true}
	if fits && sameBytes(have, data, crc) {
		st.etag = have.ETag
		return st, nil
	}
	if !staged && a.req.Stager != nil {
		if err := a.req.Stager.Stage(part.Number, data); err != nil {
			return st, fmt.Errorf("stage: %w", err)
		}
		if err := a.hook(func() error { return a.req.Hooks.CallPartStaged(part.Number) }); err != nil {
			return st, err
		}
	}
	etag, err := a.uploadPart(ctx, part.Number, data, crc)
	if err != nil {
		return st, err
	}
	st.etag = etag
	return st, a.hook(func() error { return a.req.Hooks.CallPartDone(part.Number, false) })
}

// sameBytes: an existing part holds data (by CRC, else by an MD5 ETag).
func sameBytes(have objstore.PartInfo, data []byte, crc uint32) bool {
	if have.HasCRC32C {
		return have.CRC32C == crc
	}
	sum := md5.Sum(data)
	return strings.Trim(have.ETag, `"`) == hex.EncodeToString(sum[:])
}

// copySource is the x-amz-copy-source value: bucket/key, URL-encoded.
func copySource(bucket, fullKey string) string {
	segs := strings.Split(fullKey, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return bucket + "/" + strings.Join(segs, "/")
}

func (a *assembly) copyPart(ctx context.Context, part objstore.Part) (partState, error) {
	seg := part.Segments[0]
	p := a.pieces[seg.Piece]
	off := p.Off + seg.Off
	in := &s3.UploadPartCopyInput{
		Bucket: &a.req.Bucket, Key: &a.fullKey, UploadId: &a.uploadID,
		PartNumber:      aws.Int32(int32(part.Number)),
		CopySource:      aws.String(copySource(p.SrcBucket, a.s.cfg.KeyPrefix+p.SrcKey)),
		CopySourceRange: aws.String(fmt.Sprintf("bytes=%d-%d", off, off+seg.Len-1)),
	}
	if p.SrcETag != "" {
		in.CopySourceIfMatch = aws.String(p.SrcETag)
	}
	var st partState
	err := a.s.do(ctx, "UploadPartCopy", func(ctx context.Context) error {
		out, err := a.s.client.UploadPartCopy(ctx, in)
		if err != nil {
			return err
		}
		if out.CopyPartResult == nil || out.CopyPartResult.ETag == nil {
			return fmt.Errorf("%w: copy result without ETag", errProtocol)
		}
		st = partState{etag: aws.ToString(out.CopyPartResult.ETag)}
		if c, err := objstore.DecodeCRC32C(aws.ToString(out.CopyPartResult.ChecksumCRC32C)); err == nil {
			st.crc, st.hasCRC = c, true
		}
		return nil
	})
	if err != nil {
		err = fmt.Errorf("copy %s/%s [%d,+%d): %w", p.SrcBucket, p.SrcKey, off, seg.Len, mapErr(err, objstore.ErrSourceChanged))
		if !errors.Is(err, objstore.ErrNoUpload) {
			err = &objstore.SourceError{Bucket: p.SrcBucket, Key: p.SrcKey, Err: err}
		}
		return st, err
	}
	objstore.ObserverFrom(ctx).Bytes(objstore.Copied, seg.Len)
	return st, nil
}

func (a *assembly) uploadPart(ctx context.Context, number int, data []byte, crc uint32) (string, error) {
	var etag string
	enc := objstore.EncodeCRC32C(crc)
	err := a.s.do(ctx, "UploadPart", func(ctx context.Context) error {
		out, err := a.s.client.UploadPart(ctx, &s3.UploadPartInput{
			Bucket: &a.req.Bucket, Key: &a.fullKey, UploadId: &a.uploadID,
			PartNumber: aws.Int32(int32(number)), Body: bytes.NewReader(data),
			ContentLength:     aws.Int64(int64(len(data))),
			ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c, ChecksumCRC32C: &enc,
		})
		if err == nil {
			etag = aws.ToString(out.ETag)
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("upload: %w", mapErr(err, nil))
	}
	objstore.ObserverFrom(ctx).Bytes(objstore.Uploaded, int64(len(data)))
	return etag, nil
}

// complete publishes the upload with If-None-Match: *. A lost answer whose
// retry finds the upload gone (AWS S3, versitygw: NoSuchUpload) or the key
// taken (SeaweedFS checks the precondition first: 412) is resolved by
// looking at the key: our object (its size and multipart ETag) is success,
// any other is ErrExists.
func (a *assembly) complete(ctx context.Context, states []partState, full uint32, fullKnown bool) error {
	parts := make([]types.CompletedPart, len(states))
	for i, st := range states {
		parts[i] = types.CompletedPart{PartNumber: aws.Int32(int32(a.plan.Parts[i].Number)), ETag: aws.String(st.etag)}
		if a.mode == objstore.ChecksumFullObject {
			parts[i].ChecksumCRC32C = aws.String(objstore.EncodeCRC32C(st.crc))
		}
	}
	in := &s3.CompleteMultipartUploadInput{
		Bucket: &a.req.Bucket, Key: &a.fullKey, UploadId: &a.uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
		IfNoneMatch:     aws.String("*"),
	}
	if a.mode == objstore.ChecksumFullObject {
		in.ChecksumType = types.ChecksumTypeFullObject
		in.MpuObjectSize = aws.Int64(a.plan.Size)
		if fullKnown {
			in.ChecksumCRC32C = aws.String(objstore.EncodeCRC32C(full))
		}
	}
	attempts := 0
	err := a.s.do(ctx, "CompleteMultipartUpload", func(ctx context.Context) error {
		attempts++
		_, err := a.s.client.CompleteMultipartUpload(ctx, in)
		return err
	})
	err = mapErr(err, objstore.ErrExists)
	if attempts > 1 && (errors.Is(err, objstore.ErrNoUpload) || errors.Is(err, objstore.ErrExists)) {
		attrs, herr := a.s.Head(ctx, a.req.Bucket, a.req.Key)
		switch {
		case herr == nil && attrs.Size == a.plan.Size && attrs.ETag == multipartETag(states):
			return nil
		case herr == nil:
			return fmt.Errorf("complete: the key holds another object: %w", objstore.ErrExists)
		}
	}
	if err != nil {
		return fmt.Errorf("complete upload %s: %w", a.uploadID, err)
	}
	return nil
}

// multipartETag is S3's ETag of a completed upload: the MD5 of the parts'
// binary MD5s, a dash, and the part count.
func multipartETag(states []partState) string {
	h := md5.New()
	for _, st := range states {
		b, err := hex.DecodeString(strings.Trim(st.etag, `"`))
		if err != nil {
			return ""
		}
		h.Write(b)
	}
	return fmt.Sprintf(`"%s-%d"`, hex.EncodeToString(h.Sum(nil)), len(states))
}
