package cluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"

	"golang.org/x/sys/unix"

	"github.com/sandlot-dev/sandlot/internal/crienv"
	"github.com/sandlot-dev/sandlot/internal/juicefs"
)

// The JuiceFS CSI driver a JuiceFSCSI cluster installs (hack/juicefs-bins.sh csi).
const (
	JuiceFSCSIVersion = "v0.32.4"
	juicefsCSIImage   = "docker.io/sandlot/juicefs-csi-driver:" + JuiceFSCSIVersion
	juicefsSecret     = "juicefs-secret"
	// JuiceFSStorePV is the static PV the chart's PVC sandlot-store binds.
	JuiceFSStorePV = "sandlot-store"
	// JuiceFSMetricsPort: each node's client (in its CSI node plugin pod) serves metrics there.
	JuiceFSMetricsPort = 9567
)

// juicefsCSIDir holds the driver's binaries, image and upstream manifests.
func juicefsCSIDir() string { return filepath.Join(cacheDir(), "juicefs-csi", JuiceFSCSIVersion) }

// sharedDir makes the cluster's directory a shared mount (a bind of
// itself): the CSI node plugin's Bidirectional and the agent's
// HostToContainer mounts of kubelet directories need a shared source, as
// systemd makes / on a real node; this host's / is private.
func (c *Cluster) sharedDir(t crienv.T) error {
	if !c.JuiceFSCSI {
		return nil
	}
	if err := unix.Mount(c.Dir, c.Dir, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s: %w", c.Dir, err)
	}
	t.Cleanup(func() {
		if err := crienv.UnmountUnder(c.Dir); err != nil {
			t.Errorf("cluster: %v", err)
		}
	})
	if err := unix.Mount("", c.Dir, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s shared: %w", c.Dir, err)
	}
	return nil
}

// juicefsVolume formats the volume a JuiceFSCSI cluster's store lives on:
// Redis on the API bridge (the CSI node plugins are pods) and a bucket on
// the cluster's MinIO.
func (c *Cluster) juicefsVolume(t crienv.T) error {
	if !c.JuiceFSCSI {
		return nil
	}
	if c.MinIOServer == nil {
		return errors.New("JuiceFSCSI needs MinIO")
	}
	for _, f := range []string{"image.tar", "k8s.yaml"} {
		if _, err := os.Stat(filepath.Join(juicefsCSIDir(), f)); err != nil {
			return fmt.Errorf("%w: run `hack/juicefs-bins.sh csi` (make juicefs-bins)", err)
		}
	}
	c.JuiceFSVolume = juicefs.StartOn(t, filepath.Join(c.Dir, "jfs"), c.MinIOServer, c.apiIP)
	return nil
}

// juicefsCSI installs the JuiceFS CSI driver from upstream's manifests,
// its node plugin mounting by process (no mount pods: no juicefs mount
// image to build), one DaemonSet per node because the nodes share this
// host and each kubelet has its own root; then the volume's Secret and
// the static PV the chart's PVC binds.
func (c *Cluster) juicefsCSI(t crienv.T) error {
	if !c.JuiceFSCSI {
		return nil
	}
	for _, n := range c.Nodes {
		n.CRI.ImportArchive(t, filepath.Join(juicefsCSIDir(), "image.tar"), juicefsCSIImage)
	}
	cs, err := c.Clientset()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	objs, err := upstreamCSIObjects()
	if err != nil {
		return err
	}
	for _, obj := range objs {
		if err := c.createCSIObject(ctx, cs, obj); err != nil {
			return err
		}
	}
	if err := c.juicefsStoreVolume(ctx, cs); err != nil {
		return err
	}
	return c.waitCSINodes(ctx, cs)
}

// upstreamCSIObjects are the node side of upstream's deploy/k8s.yaml: its
// ServiceAccount, ClusterRole and binding, ConfigMap, CSIDriver and the
// node DaemonSet (the controller, dashboard and their RBAC are left out:
// a static PV needs no provisioner).
func upstreamCSIObjects() ([]runtime.Object, error) {
	data, err := os.ReadFile(filepath.Join(juicefsCSIDir(), "k8s.yaml"))
	if err != nil {
		return nil, err
	}
	keep := []string{"juicefs-csi-node-sa", "juicefs-csi-external-node-service-role", "juicefs-csi-node-service-binding",
		"juicefs-csi-driver-config", "csi.juicefs.com", "juicefs-csi-node"}
	dec := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []runtime.Object
	for {
		doc, err := dec.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("upstream k8s.yaml: %w", err)
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("upstream k8s.yaml: %w", err)
		}
		if m, ok := obj.(metav1.Object); ok && slices.Contains(keep, m.GetName()) {
			objs = append(objs, obj)
		}
	}
}

func (c *Cluster) createCSIObject(ctx context.Context, cs *kubernetes.Clientset, obj runtime.Object) error {
	var err error
	switch o := obj.(type) {
	case *corev1.ServiceAccount:
		_, err = cs.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.ClusterRole:
		_, err = cs.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.ClusterRoleBinding:
		_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
	case *corev1.ConfigMap:
		_, err = cs.CoreV1().ConfigMaps(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *storagev1.CSIDriver:
		_, err = cs.StorageV1().CSIDrivers().Create(ctx, o, metav1.CreateOptions{})
	case *appsv1.DaemonSet:
		for _, n := range c.Nodes {
			ds := c.nodePluginFor(o, n)
			if _, err = cs.AppsV1().DaemonSets(ds.Namespace).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
				break
			}
		}
	default:
		err = fmt.Errorf("unexpected %T", obj)
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("juicefs csi: %w", err)
	}
	return nil
}

// juicefsStoreVolume: the volume's Secret (what the node plugin formats
// and mounts with) and a static PV claimed by the chart's PVC.
func (c *Cluster) juicefsStoreVolume(ctx context.Context, cs *kubernetes.Clientset) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ReleaseNamespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	v := c.JuiceFSVolume
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: juicefsSecret, Namespace: ReleaseNamespace},
		StringData: map[string]string{"name": juicefs.VolumeName, "metaurl": v.MetaURL, "storage": "minio",
			"bucket": "http://" + v.S3.Endpoint + "/" + v.Bucket, "access-key": c.S3.AccessKey, "secret-key": c.S3.SecretKey}}
	if _, err := cs.CoreV1().Secrets(ReleaseNamespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: JuiceFSStorePV},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("100Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              juicefsStorageClass,
			ClaimRef:                      &corev1.ObjectReference{Namespace: ReleaseNamespace, Name: "sandlot-store"},
			// What docs/install.md asks of a StorageClass: writeback, a
			// cache on the node (/var/jfsCache is each node's own here).
			// free-space-ratio: the nodes share the test machine's disk,
			// which other work fills; JuiceFS stops staging writes below
			// it (default 10% free).
			MountOptions: append([]string{"writeback", "upload-delay=0", "cache-dir=/var/jfsCache", "free-space-ratio=0.03", "no-usage-report",
				fmt.Sprintf("metrics=0.0.0.0:%d", JuiceFSMetricsPort)}, c.JuiceFSMountOptions...),
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: "csi.juicefs.com", VolumeHandle: JuiceFSStorePV, FSType: "juicefs",
				NodePublishSecretRef: &corev1.SecretReference{Name: juicefsSecret, Namespace: ReleaseNamespace}}},
		}}
	if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// juicefsStorageClass is the chart's default storage.juicefs.storageClassName.
const juicefsStorageClass = "juicefs-sc"

// waitCSINodes waits until every kubelet registered the driver.
func (c *Cluster) waitCSINodes(ctx context.Context, cs *kubernetes.Clientset) error {
	for _, n := range c.Nodes {
		err := n.kubelet.waitFor(2*time.Minute, "csi.juicefs.com registered on "+n.Name, func() error {
			cn, err := cs.StorageV1().CSINodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, d := range cn.Spec.Drivers {
				if d.Name == "csi.juicefs.com" {
					return nil
				}
			}
			return fmt.Errorf("not registered yet")
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// JuiceFSStaging is a node's writeback staging directory on the host (its
// node plugin's /var/jfsCache, the agent's --juicefs-staging-dir).
func (c *Cluster) JuiceFSStaging(node string) string {
	return filepath.Join(c.juicefsNodeDir(node), "jfscache", c.JuiceFSVolume.UUID, "rawstaging")
}

// JuiceFSStoreDir is node's mount of the store volume as the host sees
// it: the sandlot-store pod's CSI volume, where the agent and the VMs
// find the store.
func (c *Cluster) JuiceFSStoreDir(node string) (string, error) {
	link := filepath.Join(c.Dir, node, "sandlot", "store-volume", JuiceFSStorePV, "mount")
	dir, err := filepath.EvalSymlinks(link)
	if err != nil {
		return "", fmt.Errorf("%s's store volume: %w", node, err)
	}
	return dir, nil
}

func (c *Cluster) juicefsNodeDir(node string) string { return filepath.Join(c.Dir, node) }
