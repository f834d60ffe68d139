package v1alpha1

import (
	"crypto/sha256"
	"math/big"

	"k8s.io/apimachinery/pkg/types"
)

// SandboxIDLength is the length of a sandbox ID (E2B SDKs split host names
// on '-', so IDs are [a-z0-9] only).
const SandboxIDLength = 20

// SandboxIDFor derives a Sandbox's ID from its UID. Deriving it (instead of
// drawing and storing a random one) means a controller that restarts between
// creating a Pod and writing status computes the same ID again, and a client
// that created the Sandbox knows its ID without waiting for status.
func SandboxIDFor(uid types.UID) string {
	sum := sha256.Sum256([]byte(uid))
	s := new(big.Int).SetBytes(sum[:]).Text(36)
	for len(s) < SandboxIDLength {
		s = "0" + s
	}
	return s[:SandboxIDLength]
}

// ValidSandboxID reports whether s has the form of a sandbox ID.
func ValidSandboxID(s string) bool {
	if len(s) != SandboxIDLength {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') {
			return false
		}
	}
	return true
}
