package nodeagent

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/nodeagent/store"
)

// TestRemoteStatus: each remote state of the store is one remoteStatus of
// the API, with the RemoteReady condition the agent writes for it.
func TestRemoteStatus(t *testing.T) {
	ready := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		store   store.Status
		want    sandlotv1.RemoteStatus
		final   bool
		cond    metav1.ConditionStatus // "": no condition
		message string
	}{
		{store.Status{Remote: store.RemotePending}, sandlotv1.RemoteInProgress, false, metav1.ConditionFalse, "upload queued"},
		{store.Status{Remote: store.RemotePending, Message: "resumed after failed"}, sandlotv1.RemoteInProgress, false, metav1.ConditionFalse, "resumed after failed"},
		{store.Status{Remote: store.RemoteInProgress, Message: "attempt 2 failed"}, sandlotv1.RemoteInProgress, false, metav1.ConditionFalse, "attempt 2 failed"},
		{store.Status{Remote: store.RemoteInProgress}, sandlotv1.RemoteInProgress, false, metav1.ConditionFalse, "remote status InProgress"},
		{store.Status{Remote: store.RemoteReady, ReadyTime: ready}, sandlotv1.RemoteReady, true, metav1.ConditionTrue, "every file and the data it depends on are in the store"},
		{store.Status{Remote: store.RemoteFailed, Message: "gone from the bucket"}, sandlotv1.RemoteFailed, true, metav1.ConditionFalse, "gone from the bucket"},
		{store.Status{Remote: store.RemoteNotApplicable}, sandlotv1.RemoteNotApplicable, true, "", ""},
		{store.Status{Remote: "Replicating"}, sandlotv1.RemoteInProgress, false, metav1.ConditionFalse, "remote status Replicating"},
	} {
		t.Run(string(tc.store.Remote)+"/"+tc.store.Message, func(t *testing.T) {
			if got := remoteStatus(tc.store.Remote); got != tc.want {
				t.Fatalf("remoteStatus(%s) = %s, want %s", tc.store.Remote, got, tc.want)
			}
			var st sandlotv1.DataStatus
			setRemote(&st, 3, tc.store)
			if st.RemoteStatus != tc.want || remoteFinal(st.RemoteStatus) != tc.final {
				t.Fatalf("status %s (final %v), want %s (final %v)", st.RemoteStatus, remoteFinal(st.RemoteStatus), tc.want, tc.final)
			}
			c := meta.FindStatusCondition(st.Conditions, sandlotv1.ConditionRemoteReady)
			switch {
			case tc.cond == "" && c != nil:
				t.Fatalf("condition %+v for a store whose data stays on the node", c)
			case tc.cond == "":
				return
			case c == nil:
				t.Fatal("no RemoteReady condition")
			case c.Status != tc.cond || c.Reason != string(tc.want) || c.Message != tc.message || c.ObservedGeneration != 3:
				t.Fatalf("condition %+v, want %s, reason %s, message %q, generation 3", c, tc.cond, tc.want, tc.message)
			}
			if tc.want == sandlotv1.RemoteReady && (st.RemoteReadyTime == nil || !st.RemoteReadyTime.Time.Equal(ready)) {
				t.Fatalf("remoteReadyTime %v, want %v", st.RemoteReadyTime, ready)
			}
		})
	}
}
