package store_test

import (
	"testing"

	"github.com/sandlot-dev/sandlot/nodeagent/store"
	"github.com/sandlot-dev/sandlot/nodeagent/store/storetest"
)

func TestLocal(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Pair {
		root := t.TempDir()
		a := mustLocal(t, root)
		return storetest.Pair{
			A: a, B: a,
			Reopen: func(t *testing.T) store.Store { return mustLocal(t, root) },
			OnDisk: func(t *testing.T, dir string) store.Store { return mustLocal(t, dir) },
		}
	})
}

func mustLocal(t *testing.T, root string) *store.Local {
	t.Helper()
	s, err := store.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
