package guest_test

import (
	"testing"

	"github.com/sandlot-dev/sandlot/test/guest"
)

// TestE2BSDK runs sdk.test.mjs (the real e2b and @e2b/code-interpreter
// packages) against the agent; every SDK call there is an assertion.
func TestE2BSDK(t *testing.T) {
	if err := guest.CheckTools(); err != nil {
		t.Fatal(err)
	}
	if err := guest.NPMInstall(); err != nil {
		t.Fatal(err)
	}
	bin, err := guest.BuildAgent(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	agent, err := guest.StartAgent(bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Stop()
	if err := guest.Run(guest.SDKEnv, "node", "--test", "--test-concurrency=1", "sdk.test.mjs"); err != nil {
		t.Fatal(err)
	}
}
