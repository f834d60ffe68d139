package e2b

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// API keys at rest. A keys Secret holds each key's salted SHA-256, never
// the key: `sandlot-api issue-key` shows a key once and stores its hash,
// and the API rewrites a key stored in plain text (a Secret from before
// this, or one an operator wrote by hand) to its hash when it starts. A
// key is 160 random bits: a fast hash with a salt of its own is enough
// (stretching defends guessable passwords; nothing here is guessable),
// and a request hashes once per stored key, well under a microsecond each.

// keyHashPrefix marks a stored value as a hash: sandlot-sha256:<salt>:<sum>,
// both unpadded base64url.
const keyHashPrefix = "sandlot-sha256:"

// HashAPIKey is the value a keys Secret stores for key.
func HashAPIKey(key string) (string, error) {
	if key == "" {
		return "", fmt.Errorf("hash an API key: the key is empty")
	}
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("hash an API key: draw a salt: %w", err)
	}
	enc := base64.RawURLEncoding
	return keyHashPrefix + enc.EncodeToString(salt) + ":" + enc.EncodeToString(saltedSum(salt, key)), nil
}

func saltedSum(salt []byte, key string) []byte {
	h := sha256.New()
	h.Write(salt)
	h.Write([]byte(key))
	return h.Sum(nil)
}

// isKeyHash reports whether a stored value is a hash (not a key).
func isKeyHash(stored string) bool { return strings.HasPrefix(stored, keyHashPrefix) }

// keyMatches compares key with a stored value in constant time: with its
// hash, or with a key still stored in plain text (until the API's start
// rewrites it). A malformed hash matches nothing.
func keyMatches(key, stored string) bool {
	stored = strings.TrimSpace(stored)
	if !isKeyHash(stored) {
		return sameSecret(key, stored)
	}
	saltText, sumText, ok := strings.Cut(strings.TrimPrefix(stored, keyHashPrefix), ":")
	salt, err1 := base64.RawURLEncoding.DecodeString(saltText)
	sum, err2 := base64.RawURLEncoding.DecodeString(sumText)
	if !ok || err1 != nil || err2 != nil || len(salt) == 0 || len(sum) != sha256.Size || key == "" {
		return false
	}
	return subtle.ConstantTimeCompare(saltedSum(salt, key), sum) == 1
}

// HashStoredKeys rewrites every key a served keys Secret stores in plain
// text to its hash; it returns how many it rewrote. The key stays valid.
func (s *Server) HashStoredKeys(ctx context.Context) (int, error) {
	sets, err := s.keySets(ctx, s.kube.direct)
	if err != nil {
		return 0, fmt.Errorf("read the keys Secrets: %w", err)
	}
	total := 0
	for _, set := range sets {
		key := client.ObjectKeyFromObject(set.secret)
		n, err := s.hashSecretKeys(ctx, key)
		total += n
		if err != nil {
			return total, fmt.Errorf("hash the keys of Secret %s: %w", key, err)
		}
	}
	return total, nil
}

// hashSecretKeys hashes one Secret's plain keys, retrying on a conflict
// (issue-key may add a key at the same time).
func (s *Server) hashSecretKeys(ctx context.Context, key client.ObjectKey) (int, error) {
	hashed := 0
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		hashed = 0
		sec := &corev1.Secret{}
		if err := s.kube.direct.Get(ctx, key, sec); err != nil {
			return err
		}
		for name, v := range sec.Data {
			if plain := strings.TrimSpace(string(v)); plain != "" && !isKeyHash(plain) {
				h, err := HashAPIKey(plain)
				if err != nil {
					return err
				}
				sec.Data[name] = []byte(h)
				hashed++
			}
		}
		if hashed == 0 {
			return nil
		}
		return s.kube.Update(ctx, sec)
	})
	return hashed, err
}

// keyRereads lets a key no cached Secret holds be looked up once more in
// the API server's Secrets, at most once a second: a key is good as soon
// as issue-key printed it, and unknown keys cannot make every request a
// read of the API server.
type keyRereads struct {
	mu   sync.Mutex
	last time.Time
}

func (k *keyRereads) allow(now time.Time) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if now.Sub(k.last) < time.Second {
		return false
	}
	k.last = now
	return true
}
