package store

// SetS3Hooks lets tests act at precise points of an upload: beforePut
// runs before each object's PUT, attempt before each upload attempt.
func SetS3Hooks(s *S3, beforePut func(key, object string), attempt func(key string, n int)) {
	s.hooks = s3Hooks{beforePut: beforePut, attempt: attempt}
}

// AbandonS3 stops s the way a dying process does, without waiting: the
// upload in flight fails on its canceled context and records nothing more.
func AbandonS3(s *S3) { s.cancel() }

// SkipVerify makes s download without hashing: what the verification
// costs, measured against it.
func SkipVerify(s *S3) { s.hooks.skipVerify = true }

// Sign and Verify sign a manifest's bytes for key, and verify them.
func Sign(k *Keys, key string, data []byte) string { return k.sign(purposeManifest, key, data) }

func Verify(k *Keys, key string, data []byte, sig string) error {
	return k.verify(purposeManifest, key, data, sig)
}

// SignMarker signs a completion marker's payload for key with k (a
// forger's key, in tests).
func SignMarker(k *Keys, key string, payload []byte) string {
	return k.sign(purposeMarker, key, payload)
}

// SignRecord signs a juicefs record for key with k.
func SignRecord(k *Keys, key string, rec []byte) string { return k.sign(purposeRecord, key, rec) }
