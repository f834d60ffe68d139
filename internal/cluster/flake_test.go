package cluster

import "testing"

// TestIsStartFlake: only the kubelet's EXDEV socket rename at start-up
// is retried; any other early exit fails the cluster's start.
func TestIsStartFlake(t *testing.T) {
	for log, want := range map[string]bool{
		`E1206 15:01:20.548121 server.go:289] "Failed to create listener for pods API endpoint" err="failed to move temporary file to addr \"/x/pods-api/pods-api.sock\": rename /x/pods-api/3452661959 /x/pods-api/pods-api.sock: invalid cross-device link"`: true,
		`E1206 server.go:201] "Failed to create listener for podResources endpoint" err="... invalid cross-device link"`:                                                                                                                                       true,
		`E1206 run.go:72] "command failed" err="failed to run Kubelet: validate service connection: CRI v1 runtime API is not implemented"`:                                                                                                                    false,
		`I1206 server.go:1336] "Started kubelet"`: false,
	} {
		if got := isStartFlake(log); got != want {
			t.Errorf("isStartFlake(%.60q) = %t, want %t", log, got, want)
		}
	}
}
