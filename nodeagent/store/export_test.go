package store

// SetS3Hooks lets tests act at precise points of an upload: beforePut
// runs before each object's PUT, attempt before each upload attempt.
func SetS3Hooks(s *S3, beforePut func(key, object string), attempt func(key string, n int)) {
	s.hooks = s3Hooks{beforePut: beforePut, attempt: attempt}
}

// AbandonS3 stops s the way a dying process does, without waiting: the
// upload in flight fails on its canceled context and records nothing more.
func AbandonS3(s *S3) { s.cancel() }
