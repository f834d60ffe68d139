package chart

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// checkAPI checks that the API gets the values its checks need: the
// platform's egress denials (an allowOut inside them is a 400) and the
// bounds on build uploads.
func checkAPI(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	args := d.Spec.Template.Spec.Containers[0].Args
	hasArg(t, args, "--deny-out=0.0.0.0/8,10.0.0.0/8,100.64.0.0/10,127.0.0.0/8,169.254.0.0/16,172.16.0.0/12,192.168.0.0/16,224.0.0.0/4,240.0.0.0/4")
	for _, a := range []string{"--max-build-files=64", "--max-build-vcpu=8", "--max-build-memory-mib=16384", "--max-build-files-bytes=67108864", "--max-pending-builds=64",
		"--upload-rate=2", "--upload-burst=40", "--operation-rate=5", "--operation-burst=30"} {
		hasArg(t, args, a)
	}
}
