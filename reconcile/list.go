package reconcile

import (
	"context"
	"errors"
	"fmt"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/objstore"
)

// listObjects lists the stream's settled prefix and reads each object's
// footer: the objects by key base, and every key present.
func listObjects(ctx context.Context, d Deps, st catalog.Stream, v catalog.ReconcileView, sr *StreamReport) (map[uint64][]*object, map[string]bool, error) {
	var found []bundle.SettledObject
	err := d.Reader.ListSettled(ctx, st, func(o bundle.SettledObject) error {
		found = append(found, o)
		return nil
	}, func(_ string, o objstore.ObjectInfo, _ error) error {
		sr.Foreign = append(sr.Foreign, o.Key)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrIncomplete, err)
	}
	sr.ObjectsListed = len(found) + len(sr.Foreign)
	intents := map[string]string{} // key -> kind (publish wins)
	for _, in := range v.Intents {
		if intents[in.ObjectKey] != "publish" {
			intents[in.ObjectKey] = in.Kind
		}
	}
	cataloged := map[string]bool{}
	for _, e := range v.Entries {
		cataloged[entryKeyOf(st, e)] = true
	}
	byBase := map[uint64][]*object{}
	present := map[string]bool{}
	for _, so := range found {
		key, kc := so.Key, so.Coords
		present[key] = true
		if kc.Stream != st.ID || kc.Epoch != st.Epoch || kc.Bucket != st.Bucket {
			sr.Foreign = append(sr.Foreign, key)
			continue
		}
		kp := bundlefmt.SettledKeyParts{Bucket: kc.Bucket, Stream: kc.Stream, StreamEpoch: uint64(kc.Epoch),
			FirstRecord: uint64(kc.FirstRecord), Revision: uint32(kc.Revision)}
		// An unsound object is never cataloged nor reaped, but its base is
		// raised past it all the same.
		unsound := func(err error) {
			sr.Unsound = append(sr.Unsound, Problem{Key: key, Error: err.Error()})
			byBase[kp.FirstRecord] = append(byBase[kp.FirstRecord],
				&object{key: key, first: kp.FirstRecord, revision: kp.Revision, end: kp.FirstRecord, bad: true})
		}
		f, err := d.Reader.StandingFooter(ctx, key)
		var q *cycle.QuarantineError
		if errors.As(err, &q) {
			unsound(err)
			continue
		}
		if errors.Is(err, objstore.ErrNotFound) {
			continue // gone since the listing (a reap of an earlier run's, or a late delete)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrIncomplete, err)
		}
		entries, err := f.Entries()
		if err == nil {
			err = contiguous(key, st.ID, kp.FirstRecord, entries)
		}
		if err != nil {
			unsound(err)
			continue
		}
		h, known := v.High[int64(kp.FirstRecord)]
		o := &object{key: key, first: kp.FirstRecord, revision: kp.Revision, end: entries[len(entries)-1].EndRecord(),
			entries: entries, size: f.ObjectSize(), footOff: f.FooterOffset(), footLen: f.FooterLength(),
			reaping: intents[key] == "reap"}
		o.eligible = cataloged[key] || intents[key] == "publish" || !known || int32(kp.Revision) > h
		byBase[kp.FirstRecord] = append(byBase[kp.FirstRecord], o)
	}
	sortObjects(byBase)
	return byBase, present, nil
}

// contiguous checks that a settled object's chunks are the stream's,
// contiguous from its key's first record.
func contiguous(key string, id catalog.StreamID, first uint64, entries []bundlefmt.Entry) error {
	if len(entries) == 0 {
		return fmt.Errorf("%s holds no chunk", key)
	}
	next := first
	for _, e := range entries {
		if e.Stream != id {
			return fmt.Errorf("%s holds a chunk of stream %s", key, e.Stream)
		}
		if e.FirstRecord != next {
			return fmt.Errorf("%s: a chunk starts at record %d, want %d", key, e.FirstRecord, next)
		}
		next = e.EndRecord()
	}
	return nil
}
