package cluster

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// nodePluginFor adapts upstream's node DaemonSet to node n of this host:
// pinned to n; the kubelet's root, the registration socket and every
// host directory of the plugin made n's own (two kubelets share the
// host); by-process mounts (--by-process=true instead of the mount pod
// manager); the images are the local one (the registrar in it too); the
// liveness sidecar, which is not built, left out with the probe it serves.
func (c *Cluster) nodePluginFor(up *appsv1.DaemonSet, n *Node) *appsv1.DaemonSet {
	ds := up.DeepCopy()
	root := filepath.Join(n.dir, "kubelet", "root")
	dir := c.juicefsNodeDir(n.Name)
	ds.Name = up.Name + "-" + n.Name
	ds.Spec.Selector.MatchLabels["sandlot.dev/node"] = n.Name
	ds.Spec.Template.Labels["sandlot.dev/node"] = n.Name
	pod := &ds.Spec.Template.Spec
	pod.NodeSelector = map[string]string{corev1.LabelHostname: n.Name}
	pod.Containers = slices.DeleteFunc(pod.Containers, func(ct corev1.Container) bool { return ct.Name == "liveness-probe" })
	for i := range pod.Containers {
		ct := &pod.Containers[i]
		ct.Image, ct.ImagePullPolicy = juicefsCSIImage, corev1.PullNever
		switch ct.Name {
		case "juicefs-plugin":
			adaptPlugin(ct, root)
		case "node-driver-registrar":
			ct.Command = []string{"/usr/local/bin/csi-node-driver-registrar"}
			setEnv(ct, "DRIVER_REG_SOCK_PATH", filepath.Join(root, "csi-plugins", "csi.juicefs.com", "csi.sock"))
		}
	}
	host := map[string]string{
		"kubelet-dir":      root,
		"plugin-dir":       filepath.Join(root, "csi-plugins", "csi.juicefs.com"),
		"registration-dir": filepath.Join(root, "plugins_registry"),
		"jfs-dir":          filepath.Join(dir, "jfs-volume"),
		"jfs-root-dir":     filepath.Join(dir, "jfs-config"),
		"jfs-fuse-fd":      filepath.Join(dir, "jfs-fuse-fd"),
	}
	create := corev1.HostPathDirectoryOrCreate
	for i := range pod.Volumes {
		if p, ok := host[pod.Volumes[i].Name]; ok && pod.Volumes[i].HostPath != nil {
			pod.Volumes[i].HostPath = &corev1.HostPathVolumeSource{Path: p, Type: &create}
		}
	}
	// The mount options' cache-dir=/var/jfsCache: this node's own.
	pod.Volumes = append(pod.Volumes, corev1.Volume{Name: "jfs-cache", VolumeSource: corev1.VolumeSource{
		HostPath: &corev1.HostPathVolumeSource{Path: filepath.Join(dir, "jfscache"), Type: &create}}})
	return ds
}

// adaptPlugin: by-process mounts, the kubelet root at its own path (the
// targets the kubelet names are host paths), the node's cache.
func adaptPlugin(ct *corev1.Container, root string) {
	for i, a := range ct.Args {
		if strings.HasPrefix(a, "--enable-manager") {
			ct.Args[i] = "--by-process=true"
		}
	}
	if !slices.Contains(ct.Args, "--by-process=true") {
		ct.Args = append(ct.Args, "--by-process=true")
	}
	ct.LivenessProbe = nil
	ct.Ports = nil
	for i := range ct.VolumeMounts {
		if ct.VolumeMounts[i].Name == "kubelet-dir" {
			ct.VolumeMounts[i].MountPath = root
		}
	}
	ct.VolumeMounts = append(ct.VolumeMounts, corev1.VolumeMount{Name: "jfs-cache", MountPath: "/var/jfsCache"})
}

func setEnv(ct *corev1.Container, name, value string) {
	for i := range ct.Env {
		if ct.Env[i].Name == name {
			ct.Env[i].Value = value
			return
		}
	}
	ct.Env = append(ct.Env, corev1.EnvVar{Name: name, Value: value})
}

// JuiceFSMetricsURL is node's client metrics (its node plugin pod's IP).
func (c *Cluster) JuiceFSMetricsURL(podIP string) string {
	return fmt.Sprintf("http://%s:%d/metrics", podIP, JuiceFSMetricsPort)
}
