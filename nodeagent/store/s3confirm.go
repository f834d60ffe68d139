package store

import (
	"context"
	"errors"
	"fmt"
)

// Confirm is Status for a key other data depends on, asked before that
// data is called restorable elsewhere: a key this node records Ready is
// checked against the bucket (its signed marker), since the record only
// says the bucket held it once. A key this node still holds whole whose
// bucket copy is gone — removed behind the store's back — is uploaded
// again and reads InProgress until it is back; one held nowhere reads
// Failed. So a dependent never reads remote Ready while the bucket lacks
// what a restore on another node will open.
func (s *S3) Confirm(ctx context.Context, key string) (Status, error) {
	st, err := s.Status(ctx, key)
	if err != nil || st.Remote != RemoteReady {
		return st, err
	}
	if _, recorded, err := s.loadState(key); err != nil || !recorded {
		return st, err // no record here: Status read the bucket's marker
	}
	_, err = s.readMarker(ctx, key)
	switch {
	case err == nil:
		return st, nil
	case !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrNotReady):
		return Status{}, fmt.Errorf("store: confirm %s: %w", key, err)
	}
	return s.republish(key, err)
}

// republish uploads again a key this node recorded Ready but the bucket
// no longer holds complete (why: the marker read's error).
func (s *S3) republish(key string, why error) (Status, error) {
	unlock := s.locks.lock(key)
	defer unlock()
	st, ok, err := s.loadState(key)
	if err != nil {
		return Status{}, fmt.Errorf("store: confirm %s: %w", key, err)
	}
	have, err := exists(s.Dir(key))
	if err != nil {
		return Status{}, fmt.Errorf("store: confirm %s: %w", key, err)
	}
	if !ok || !have {
		return Status{Remote: RemoteFailed, Message: fmt.Sprintf("the bucket no longer holds %s and neither does this node: %v", key, why)}, nil
	}
	if s.running(key) {
		return Status{Remote: RemoteInProgress, Message: "uploading again: " + why.Error()}, nil
	}
	s.cfg.Logf("store: %s is Ready here but not complete in the bucket (%v): uploading it again", key, why)
	st.Origin, st.Remote, st.Message = originLocal, RemotePending, "missing from the bucket: uploading it again"
	for i := range st.Files {
		st.Files[i].Uploaded = false
	}
	if err := writeJSON(s.statePath(key), st); err != nil {
		return Status{}, fmt.Errorf("store: confirm %s: upload state: %w", key, err)
	}
	s.cache.forget(key) // the only copy again: neither counted nor evicted
	s.startUpload(st)
	return Status{Remote: RemoteInProgress, Message: st.Message, Bytes: st.Bytes}, nil
}
