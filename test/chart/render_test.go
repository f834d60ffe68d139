package chart

import (
	"cmp"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sandlot-dev/sandlot/nodeagent/install"
)

// TestRender: each mode renders every component with the agent set up
// for its store and runtime registration.
func TestRender(t *testing.T) {
	for name, vals := range modes {
		t.Run(name, func(t *testing.T) {
			objs := render(t, vals)
			for _, k := range []string{
				"CustomResourceDefinition/sandboxes.sandlot.dev", "CustomResourceDefinition/templates.sandlot.dev",
				"CustomResourceDefinition/snapshots.sandlot.dev", "CustomResourceDefinition/pausedsandboxes.sandlot.dev",
				"Deployment/sandlot-controller", "ServiceAccount/sandlot-controller", "ClusterRole/sandlot-controller",
				"ClusterRoleBinding/sandlot-controller", "Role/sandlot-controller-leader-election",
				"RoleBinding/sandlot-controller-leader-election", "Service/sandlot-controller-metrics",
				"Deployment/sandlot-api", "ServiceAccount/sandlot-api", "ClusterRole/sandlot-api", "RoleBinding/sandlot-api",
				"Service/sandlot-api", "Service/sandlot-api-metrics", "Secret/sandlot-api-keys",
				"DaemonSet/sandlot-agent", "ServiceAccount/sandlot-agent", "ClusterRole/sandlot-agent",
				"ClusterRoleBinding/sandlot-agent", "Role/sandlot-agent-uninstall", "Service/sandlot-agent-metrics",
				"RuntimeClass/sandlot",
			} {
				if _, ok := objs[k]; !ok {
					t.Errorf("no %s", k)
				}
			}
			for k, u := range objs {
				if ns := u.GetNamespace(); ns != "" && ns != namespace && !strings.HasPrefix(k, "Secret/sandlot-api-keys") &&
					k != "RoleBinding/sandlot-api" {
					t.Errorf("%s in namespace %s, want %s", k, ns, namespace)
				}
			}
			var ds appsv1.DaemonSet
			objs.into(t, "DaemonSet", "sandlot-agent", &ds)
			checkAgent(t, name, &ds)
			var api appsv1.Deployment
			objs.into(t, "Deployment", "sandlot-api", &api)
			checkAPI(t, &api)
		})
	}
}

// checkAgent checks the agent's pod for a mode.
func checkAgent(t *testing.T, mode string, ds *appsv1.DaemonSet) {
	t.Helper()
	spec := ds.Spec.Template.Spec
	if !reflect.DeepEqual(spec.NodeSelector, map[string]string{"sandlot.dev/runtime": "true"}) {
		t.Errorf("nodeSelector %v", spec.NodeSelector)
	}
	agent := spec.Containers[0]
	if agent.SecurityContext.Privileged == nil || !*agent.SecurityContext.Privileged {
		t.Error("agent not privileged")
	}
	hasArg(t, agent.Args, "--node-name=$(NODE_NAME)")
	hasArg(t, agent.Args, "--sandlot-root=/run/sandlot")
	if e := env(agent, "NODE_NAME"); e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("NODE_NAME: %+v, want spec.nodeName", e)
	}
	// The shims admit the agent's pod: a template build reaches its builder from it.
	hasArg(t, agent.Args, "--pod-ip=$(POD_IP)")
	if e := env(agent, "POD_IP"); e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef.FieldPath != "status.podIP" {
		t.Errorf("POD_IP: %+v, want status.podIP", e)
	}
	store := map[string]string{"juicefs": "juicefs", "s3": "s3"}[mode]
	if store == "" {
		store = "local"
	}
	hasArg(t, agent.Args, "--store="+store)
	if store != "juicefs" {
		hasArg(t, agent.Args, "--store-dir=/var/lib/sandlot/store")
	}

	install := spec.InitContainers[0]
	if install.Name != "install" || install.Args[0] != "install" || install.SecurityContext.Privileged == nil || !*install.SecurityContext.Privileged {
		t.Fatalf("init container %s %v: want sandlot-agent install, privileged", install.Name, install.Args)
	}
	hasArg(t, install.Args, "--shim-config=/etc/sandlot/shim.json")
	pre := agent.Lifecycle.PreStop.Exec.Command
	if pre[1] != "uninstall" {
		t.Fatalf("preStop %v: want sandlot-agent uninstall", pre)
	}
	hasArg(t, pre, "--unless-daemonset="+namespace+"/sandlot-agent")
	register := mode != "no runtime registration"
	for _, args := range [][]string{install.Args, pre} {
		if got := slices.Contains(args, "--containerd-dropin=/etc/containerd/conf.d/sandlot.toml"); got != register {
			t.Errorf("%v: drop-in flag %v, want %v", args, got, register)
		}
		if i := slices.Index(args, "--"); register && (i < 0 || !slices.Equal(args[i+1:],
			[]string{"systemctl", "restart", "containerd"})) {
			t.Errorf("%v: want the restart command after --", args)
		}
	}
	if spec.HostPID != register {
		t.Errorf("hostPID %v, want %v (systemctl, chrooted in the host's /, reaches its systemd)", spec.HostPID, register)
	}
}

func hasArg(t *testing.T, args []string, want string) {
	t.Helper()
	if !slices.Contains(args, want) {
		t.Errorf("args %v lack %q", args, want)
	}
}

func env(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

func TestRenderMounts(t *testing.T) {
	for name, vals := range modes {
		t.Run(name, func(t *testing.T) {
			var ds appsv1.DaemonSet
			render(t, vals).into(t, "DaemonSet", "sandlot-agent", &ds)
			want := [][2]string{{"/run/sandlot", "/run/sandlot"}, {"/host", "/"}}
			if name != "juicefs" {
				want = append(want, [2]string{"/var/lib/sandlot/store", "/var/lib/sandlot/store"})
			} else {
				want = append(want, [2]string{"/var/lib/kubelet/pods", "/var/lib/kubelet/pods"},
					[2]string{"/var/jfsCache/uuid/rawstaging", "/var/jfsCache/uuid/rawstaging"})
			}
			for _, w := range want {
				if got := hostPathOf(&ds, ds.Spec.Template.Spec.Containers[0], w[0]); got != w[1] {
					t.Errorf("mount %s: host path %q, want %q", w[0], got, w[1])
				}
			}
		})
	}
}

// hostPathOf is the host path mounted at mountPath in c ("" if none).
func hostPathOf(ds *appsv1.DaemonSet, c corev1.Container, mountPath string) string {
	for _, m := range c.VolumeMounts {
		if m.MountPath != mountPath {
			continue
		}
		for _, v := range ds.Spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.HostPath != nil {
				return v.HostPath.Path
			}
		}
	}
	return ""
}

func TestRenderJuiceFS(t *testing.T) {
	objs := render(t, modes["juicefs"])
	var pvc corev1.PersistentVolumeClaim
	objs.into(t, "PersistentVolumeClaim", "sandlot-store", &pvc)
	if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != "jfs-rwx" ||
		!slices.Equal(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}) {
		t.Errorf("PVC class %v modes %v: want jfs-rwx, ReadWriteMany", pvc.Spec.StorageClassName, pvc.Spec.AccessModes)
	}
	if pvc.Annotations["helm.sh/resource-policy"] != "keep" {
		t.Error("the PVC holding every snapshot is not kept on uninstall")
	}
	var sc storagev1.StorageClass
	objs.into(t, "StorageClass", "jfs-rwx", &sc)
	if sc.Provisioner != "csi.juicefs.com" || !slices.Equal(sc.MountOptions,
		[]string{"writeback", "cache-dir=/var/jfsCache", "cache-size=102400", "prefetch=16"}) {
		t.Errorf("StorageClass %s %v: want JuiceFS CSI with the benchmark's mount options", sc.Provisioner, sc.MountOptions)
	}
	var ds appsv1.DaemonSet
	objs.into(t, "DaemonSet", "sandlot-agent", &ds)
	agent := ds.Spec.Template.Spec.Containers[0]
	hasArg(t, agent.Args, "--juicefs-dir=/run/sandlot/store-volume/*/mount")
	hasArg(t, agent.Args, "--juicefs-staging-dir=/var/jfsCache/uuid/rawstaging")
	hasArg(t, agent.Args, "--juicefs-upload-deadline=1h")
	noStaging := merge(modes["juicefs"], map[string]any{"storage": map[string]any{"juicefs": map[string]any{"stagingDir": ""}}})
	if _, _, err := release(noStaging); err == nil || !strings.Contains(err.Error(), "stagingDir") {
		t.Errorf("juicefs without stagingDir: %v, want the schema to refuse it by name", err)
	}
	for _, m := range agent.VolumeMounts {
		if m.Name != "host-root" && m.Name != "manifest-key" && (m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer) {
			t.Errorf("agent mount %s: propagation %v, want HostToContainer (the store pod's CSI mount appears after the agent starts)", m.MountPath, m.MountPropagation)
		}
	}
	if claims(ds.Spec.Template.Spec) {
		t.Error("the agent mounts the PVC: replacing its pod would unpublish the volume under running VMs")
	}
	checkStoreHolder(t, objs)
	// Without createStorageClass the class is the user's.
	objs = render(t, merge(modes["juicefs"], map[string]any{"storage": map[string]any{"juicefs": map[string]any{"createStorageClass": false}}}))
	if _, ok := objs[key("StorageClass", "jfs-rwx")]; ok {
		t.Error("StorageClass created though createStorageClass is false")
	}
}

// checkStoreHolder: the sandlot-store DaemonSet holds the PVC, is never
// replaced by an upgrade, and links its CSI volumes directory where the
// agent's --juicefs-dir looks.
func checkStoreHolder(t *testing.T, objs objects) {
	t.Helper()
	var ds appsv1.DaemonSet
	objs.into(t, "DaemonSet", "sandlot-store", &ds)
	if ds.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType {
		t.Errorf("sandlot-store update strategy %q, want OnDelete", ds.Spec.UpdateStrategy.Type)
	}
	if !claims(ds.Spec.Template.Spec) {
		t.Error("sandlot-store does not mount the PVC")
	}
	hold := ds.Spec.Template.Spec.Containers[0]
	if !slices.Equal(hold.Command, []string{"/sandlot-agent", "hold-volume"}) {
		t.Errorf("sandlot-store command %v", hold.Command)
	}
	hasArg(t, hold.Args, "--link=/run/sandlot/store-volume")
	hasArg(t, hold.Args, "--target=/var/lib/kubelet/pods/$(POD_UID)/volumes/kubernetes.io~csi")
	if e := env(hold, "POD_UID"); e == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.uid" {
		t.Errorf("POD_UID: %+v", e)
	}
	if sc := hold.SecurityContext; sc == nil || sc.Privileged != nil && *sc.Privileged || sc.Capabilities == nil ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("sandlot-store's container %+v: want no capabilities and no privilege escalation (it writes one link)", sc)
	}
	if got := hostPathOf(&ds, hold, "/run/sandlot"); got != "/run/sandlot" {
		t.Errorf("sandlot-store's link directory on the host %q, want /run/sandlot", got)
	}
}

func claims(spec corev1.PodSpec) bool {
	for _, v := range spec.Volumes {
		if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == "sandlot-store" {
			return true
		}
	}
	return false
}

func TestRenderS3(t *testing.T) {
	objs := render(t, modes["s3"])
	var ds appsv1.DaemonSet
	objs.into(t, "DaemonSet", "sandlot-agent", &ds)
	agent := ds.Spec.Template.Spec.Containers[0]
	for _, a := range []string{"--s3-endpoint=minio.storage:9000", "--s3-bucket=sandlot", "--s3-region=us-east-1", "--s3-insecure", "--s3-upload-deadline=1h",
		"--s3-cache-max-bytes=0", "--s3-cache-max-disk-percent=50"} {
		hasArg(t, agent.Args, a)
	}
	for _, name := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
		e := env(agent, name)
		if e == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != "sandlot-s3" || e.ValueFrom.SecretKeyRef.Key != name {
			t.Errorf("%s: %+v, want from Secret sandlot-s3", name, e)
		}
	}
	var sec corev1.Secret
	objs.into(t, "Secret", "sandlot-s3", &sec)
	if sec.StringData["AWS_ACCESS_KEY_ID"] != "AKIAEXAMPLE" || sec.StringData["AWS_SECRET_ACCESS_KEY"] != "secret" {
		t.Errorf("Secret sandlot-s3: %v", sec.StringData)
	}
	// An existing Secret instead: none created, the agent reads it.
	objs = render(t, merge(modes["s3"], map[string]any{"storage": map[string]any{"s3": map[string]any{
		"existingSecret": "minio-creds", "accessKeyID": "", "secretAccessKey": ""}}}))
	if _, ok := objs[key("Secret", "sandlot-s3")]; ok {
		t.Error("Secret sandlot-s3 created though existingSecret is set")
	}
	objs.into(t, "DaemonSet", "sandlot-agent", &ds)
	if e := env(ds.Spec.Template.Spec.Containers[0], "AWS_ACCESS_KEY_ID"); e == nil || e.ValueFrom.SecretKeyRef.Name != "minio-creds" {
		t.Errorf("AWS_ACCESS_KEY_ID: %+v, want from minio-creds", e)
	}
	// A cap in bytes, large enough that a float would print as 1e+11.
	objs = render(t, merge(modes["s3"], map[string]any{"storage": map[string]any{"s3": map[string]any{
		"cacheMaxBytes": 107374182400, "cacheMaxDiskPercent": 0}}}))
	objs.into(t, "DaemonSet", "sandlot-agent", &ds)
	hasArg(t, ds.Spec.Template.Spec.Containers[0].Args, "--s3-cache-max-bytes=107374182400")
	hasArg(t, ds.Spec.Template.Spec.Containers[0].Args, "--s3-cache-max-disk-percent=0")
}

// TestRenderPerNodePaths: $(NODE_NAME) in node paths (the local cluster,
// several nodes on one host) mounts the directory above it, at the same
// path, and passes the paths to the kubelet to expand.
func TestRenderPerNodePaths(t *testing.T) {
	var ds appsv1.DaemonSet
	render(t, map[string]any{"agent": map[string]any{"registerRuntime": false}, "node": map[string]any{
		"dataDir": "/var/tmp/up/$(NODE_NAME)/data", "runDir": "/var/tmp/up/$(NODE_NAME)/run"}}).
		into(t, "DaemonSet", "sandlot-agent", &ds)
	agent := ds.Spec.Template.Spec.Containers[0]
	if got := hostPathOf(&ds, agent, "/var/tmp/up"); got != "/var/tmp/up" {
		t.Errorf("mount /var/tmp/up: host path %q", got)
	}
	hostPaths := 0
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil && v.HostPath.Path != "/" {
			hostPaths++
		}
	}
	if hostPaths != 1 {
		t.Errorf("%d host directories mounted, want one (/var/tmp/up holds both)", hostPaths)
	}
	hasArg(t, agent.Args, "--sandlot-root=/var/tmp/up/$(NODE_NAME)/run")
	hasArg(t, agent.Args, "--store-dir=/var/tmp/up/$(NODE_NAME)/data/store")
	hasArg(t, ds.Spec.Template.Spec.InitContainers[0].Args, "--kernel=/var/tmp/up/$(NODE_NAME)/data/vm/vmlinux")
}

func TestRuntimeClass(t *testing.T) {
	var got, want nodev1.RuntimeClass
	render(t, nil).into(t, "RuntimeClass", "sandlot", &got)
	u := readYAML(t, "../../config/runtimeclass/runtimeclass.yaml")
	if err := fromUnstructured(u.Object, &want); err != nil {
		t.Fatal(err)
	}
	if got.Handler != "sandlot" || !reflect.DeepEqual(got.Overhead, want.Overhead) || !reflect.DeepEqual(got.Scheduling, want.Scheduling) {
		t.Errorf("RuntimeClass handler %q overhead %+v scheduling %+v; want config/runtimeclass's %+v %+v",
			got.Handler, got.Overhead, got.Scheduling, want.Overhead, want.Scheduling)
	}
	if cpu := got.Overhead.PodFixed[corev1.ResourceCPU]; cpu.Cmp(resource.MustParse("100m")) != 0 {
		t.Errorf("overhead cpu %s, want 100m", cpu.String())
	}
	render(t, map[string]any{"runtimeClass": map[string]any{"overhead": map[string]any{"podFixed": map[string]any{"cpu": "250m", "memory": "128Mi"}}}}).
		into(t, "RuntimeClass", "sandlot", &got)
	if mem := got.Overhead.PodFixed[corev1.ResourceMemory]; mem.Cmp(resource.MustParse("128Mi")) != 0 {
		t.Errorf("overhead memory %s from values, want 128Mi", mem.String())
	}
}

// TestAPIKeys: the chart stores no key (the Secret starts empty; keys
// are issued in the API's pod, stored as hashes) and says how to issue one.
func TestAPIKeys(t *testing.T) {
	var s corev1.Secret
	objs, notes, err := release(nil)
	if err != nil {
		t.Fatal(err)
	}
	objs.into(t, "Secret", "sandlot-api-keys", &s)
	if s.Namespace != "default" {
		t.Errorf("keys Secret in %q, want api.namespace (the API reads it there)", s.Namespace)
	}
	if len(s.Data)+len(s.StringData) != 0 {
		t.Errorf("the chart's keys Secret holds %d values at install, want none (a key is shown once, at issue)", len(s.Data))
	}
	want := "exec deploy/sandlot-api -c api -- /sandlot-api issue-key --namespace default)"
	if !strings.Contains(notes, want) {
		t.Errorf("NOTES do not say how to issue a key (%q):\n%s", want, notes)
	}
	objs = render(t, map[string]any{"api": map[string]any{"keys": map[string]any{"existingSecret": "my-keys"}}})
	if _, ok := objs[key("Secret", "sandlot-api-keys")]; ok {
		t.Error("keys Secret created though existingSecret is set")
	}
	var d appsv1.Deployment
	objs.into(t, "Deployment", "sandlot-api", &d)
	hasArg(t, d.Spec.Template.Spec.Containers[0].Args, "--keys-secret=my-keys")
}

// TestRBACFromConfig: the chart's ClusterRoles grant exactly the rules
// controller-gen generated from the markers.
func TestRBACFromConfig(t *testing.T) {
	objs := render(t, nil)
	for role, file := range map[string]string{
		"sandlot-controller": "../../config/rbac/role.yaml",
		"sandlot-api":        "../../config/api/role.yaml",
		"sandlot-agent":      chartDir + "/files/agent/role.yaml",
	} {
		var got, want rbacv1.ClusterRole
		objs.into(t, "ClusterRole", role, &got)
		if err := fromUnstructured(readYAML(t, file).Object, &want); err != nil {
			t.Fatal(err)
		}
		if len(want.Rules) == 0 || !reflect.DeepEqual(got.Rules, want.Rules) {
			t.Errorf("ClusterRole %s rules\n%+v\nwant %s's\n%+v", role, got.Rules, file, want.Rules)
		}
	}
	var rb rbacv1.RoleBinding
	objs.into(t, "RoleBinding", "sandlot-api", &rb)
	if rb.Namespace != "default" || rb.RoleRef.Name != "sandlot-api" || rb.Subjects[0].Namespace != namespace {
		t.Errorf("RoleBinding sandlot-api %+v: want ClusterRole sandlot-api bound in api.namespace", rb)
	}
}

func TestImages(t *testing.T) {
	objs := render(t, map[string]any{"agent": map[string]any{"image": map[string]any{"tag": "dev"}}})
	var d appsv1.Deployment
	var ds appsv1.DaemonSet
	objs.into(t, "Deployment", "sandlot-controller", &d)
	objs.into(t, "DaemonSet", "sandlot-agent", &ds)
	ch, err := loadChart()
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Spec.Template.Spec.Containers[0].Image; got != "docker.io/sandlot/sandlot-controller:"+ch.AppVersion() {
		t.Errorf("controller image %q, want the appVersion tag", got)
	}
	if got := ds.Spec.Template.Spec.Containers[0].Image; got != "docker.io/sandlot/sandlot-agent:dev" {
		t.Errorf("agent image %q", got)
	}
	if got := ds.Spec.Template.Spec.InitContainers[0].Image; got != "docker.io/sandlot/sandlot-agent:dev" {
		t.Errorf("install image %q", got)
	}
	objs.into(t, "Deployment", "sandlot-api", &d)
	if got := d.Spec.Template.Spec.Containers[0].Image; got != "docker.io/sandlot/sandlot-api:"+ch.AppVersion() {
		t.Errorf("api image %q", got)
	}
}

// TestImageRegistry: one value moves every image to a release's registry.
func TestImageRegistry(t *testing.T) {
	for registry, prefix := range map[string]string{"10.246.0.1:5000": "10.246.0.1:5000/", "": "", "ghcr.io/acme": "ghcr.io/acme/"} {
		objs := render(t, map[string]any{"image": map[string]any{"registry": registry}})
		var d appsv1.Deployment
		var ds appsv1.DaemonSet
		objs.into(t, "Deployment", "sandlot-controller", &d)
		objs.into(t, "DaemonSet", "sandlot-agent", &ds)
		for _, got := range []string{d.Spec.Template.Spec.Containers[0].Image, ds.Spec.Template.Spec.Containers[0].Image,
			ds.Spec.Template.Spec.InitContainers[0].Image} {
			if !strings.HasPrefix(got, prefix+"sandlot/sandlot-") {
				t.Errorf("registry %q: image %q, want it under %q", registry, got, prefix)
			}
		}
	}
	if _, _, err := release(map[string]any{"image": map[string]any{"registry": "https://registry.example.com"}}); err == nil {
		t.Error("a registry URL with a scheme rendered")
	}
}

func TestServiceMonitor(t *testing.T) {
	if _, ok := render(t, nil)[key("ServiceMonitor", "sandlot")]; ok {
		t.Error("ServiceMonitor rendered by default")
	}
	sm := render(t, map[string]any{"metrics": map[string]any{"serviceMonitor": map[string]any{"enabled": true}}}).get(t, "ServiceMonitor", "sandlot")
	sel, _, _ := unstructured.NestedString(sm.Object, "spec", "selector", "matchLabels", "sandlot.dev/metrics")
	if sel != "true" {
		t.Errorf("ServiceMonitor selector %v", sm.Object["spec"])
	}
	checkScrape(t, sm, "https")
}

// TestSchemaRejects: bad values fail at install with the schema's word,
// not as a broken agent.
func TestSchemaRejects(t *testing.T) {
	for name, vals := range map[string]map[string]any{
		"unknown storage mode": {"storage": map[string]any{"mode": "nfs"}},
		"s3 without endpoint": {"storage": map[string]any{"mode": "s3", "s3": map[string]any{"bucket": "b",
			"accessKeyID": "a", "secretAccessKey": "s"}}},
		"s3 without credentials":               {"storage": map[string]any{"mode": "s3", "s3": map[string]any{"endpoint": "e:9000", "bucket": "b"}}},
		"s3 cache over the whole disk":         {"storage": map[string]any{"s3": map[string]any{"cacheMaxDiskPercent": 150}}},
		"negative s3 cache cap":                {"storage": map[string]any{"s3": map[string]any{"cacheMaxBytes": -1}}},
		"juicefs without a way to see staging": {"storage": map[string]any{"mode": "juicefs"}},
		"relative node path":                   {"node": map[string]any{"dataDir": "var/lib/sandlot"}},
		"misspelt value":                       {"agent": map[string]any{"registerRuntim": true}},
		"bad accel":                            {"agent": map[string]any{"accel": "hvf"}},
		"admission flag not a boolean":         {"admission": map[string]any{"allowPlainRuntimeClassPods": "yes"}},
		"shim memory cap below the floor":      {"node": map[string]any{"shimMemoryMaxMiB": 32}},
		"negative shim memory cap":             {"node": map[string]any{"shimMemoryMaxMiB": -1}},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := release(vals)
			if err == nil || !strings.Contains(err.Error(), "schema") {
				t.Fatalf("err = %v, want the schema's", err)
			}
		})
	}
}

// TestDropIn: the drop-in the agent writes registers the runtime as
// internal/crienv does for every cluster test, line for line, with the
// chart's shim config path.
func TestDropIn(t *testing.T) {
	var ds appsv1.DaemonSet
	render(t, nil).into(t, "DaemonSet", "sandlot-agent", &ds)
	cfgPath := ""
	for _, a := range ds.Spec.Template.Spec.InitContainers[0].Args {
		if v, ok := strings.CutPrefix(a, "--shim-config="); ok {
			cfgPath = v
		}
	}
	b, err := install.RenderDropIn(install.DropIn{ConfigPath: cfgPath})
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, w := range []string{"runtime_type = 'io.containerd.sandlot.v2'", "pod_annotations = ['sandlot.dev/*']",
		"ConfigPath = '/etc/sandlot/shim.json'"} {
		if !strings.Contains(got, w) {
			t.Errorf("drop-in lacks %q:\n%s", w, got)
		}
	}
	src, err := os.ReadFile("../../internal/crienv/crienv.go")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(src), "{{- if .SandlotConfig}}\n")
	block, _, ok2 := strings.Cut(block, "{{- end}}")
	if !ok || !ok2 {
		t.Fatal("internal/crienv/crienv.go: no {{- if .SandlotConfig}} block: update this test")
	}
	want := strings.ReplaceAll(block, "{{.SandlotConfig}}", cfgPath)
	if norm(tableOf(got)) != norm(want) {
		t.Errorf("drop-in runtime table\n%s\nwant internal/crienv's\n%s", tableOf(got), want)
	}
}

// tableOf is the drop-in from its runtime table on.
func tableOf(dropIn string) string {
	i := strings.Index(dropIn, "[plugins.")
	if i < 0 {
		return ""
	}
	return dropIn[i:]
}

// norm drops indentation and blank lines.
func norm(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestRenderWithoutInstall: nodes provisioned some other way get no init
// container, no uninstall hook and no host PID namespace; the host root
// stays, read for the node's QEMU version (--host-root).
func TestRenderWithoutInstall(t *testing.T) {
	var ds appsv1.DaemonSet
	objs := render(t, map[string]any{"agent": map[string]any{"install": map[string]any{"enabled": false}},
		"node": map[string]any{"qemu": "/usr/bin/qemu-system-x86_64"}})
	objs.into(t, "DaemonSet", "sandlot-agent", &ds)
	spec := ds.Spec.Template.Spec
	agent := spec.Containers[0]
	if len(spec.InitContainers) != 0 || agent.Lifecycle != nil || spec.HostPID {
		t.Errorf("init %v, lifecycle %v, hostPID %v: want none", spec.InitContainers, agent.Lifecycle, spec.HostPID)
	}
	if got := hostPathOf(&ds, agent, "/host"); got != "/" || !slices.Contains(agent.Args, "--host-root=/host") {
		t.Errorf("/host %q, args %v: want the node's / with --host-root=/host", got, agent.Args)
	}
	if _, ok := objs[key("Role", "sandlot-agent-uninstall")]; ok {
		t.Error("uninstall Role without an uninstall hook")
	}
}

// TestRenderQEMU: unset, node.qemu means the image's QEMU bundle, which
// the install step puts under dataDir (and its uninstall removes), and
// which the agent fingerprints as the shims run it; set, the node's own
// QEMU and no bundle. Without the install step the chart cannot say
// where a bundle is: it refuses.
func TestRenderQEMU(t *testing.T) {
	const bundled = "/var/lib/sandlot/qemu/bin/qemu-system-x86_64"
	for _, tc := range []struct {
		qemu       string
		want, gone []string // install args
	}{
		{"", []string{"--qemu-src=/opt/sandlot/qemu", "--qemu-dir=/var/lib/sandlot/qemu"}, []string{"--qemu=" + bundled}},
		{"/opt/qemu/bin/qemu-system-x86_64", []string{"--qemu=/opt/qemu/bin/qemu-system-x86_64"}, []string{"--qemu-src=/opt/sandlot/qemu"}},
	} {
		var ds appsv1.DaemonSet
		render(t, map[string]any{"node": map[string]any{"qemu": tc.qemu}}).into(t, "DaemonSet", "sandlot-agent", &ds)
		pod := ds.Spec.Template.Spec
		hasArg(t, pod.Containers[0].Args, "--qemu="+cmp.Or(tc.qemu, bundled))
		for _, args := range [][]string{pod.InitContainers[0].Args, pod.Containers[0].Lifecycle.PreStop.Exec.Command} {
			for _, a := range tc.want {
				hasArg(t, args, a)
			}
			for _, a := range tc.gone {
				if slices.Contains(args, a) {
					t.Errorf("node.qemu %q: install args %v hold %s", tc.qemu, args, a)
				}
			}
		}
	}
	_, _, err := release(map[string]any{"agent": map[string]any{"install": map[string]any{"enabled": false}}})
	if err == nil || !strings.Contains(err.Error(), "node.qemu") {
		t.Errorf("install disabled, node.qemu unset: %v, want a refusal naming node.qemu", err)
	}
}

// TestRenderShimMemory: node.shimMemoryMaxMiB reaches the shim config the
// agent installs (and its uninstall takes the same flags); 0 turns the cap
// off.
func TestRenderShimMemory(t *testing.T) {
	for _, tc := range []struct {
		vals map[string]any
		want string
	}{{nil, "--shim-memory-max-mib=128"}, {map[string]any{"node": map[string]any{"shimMemoryMaxMiB": 0}}, "--shim-memory-max-mib=0"},
		{map[string]any{"node": map[string]any{"shimMemoryMaxMiB": 512}}, "--shim-memory-max-mib=512"}} {
		var ds appsv1.DaemonSet
		render(t, tc.vals).into(t, "DaemonSet", "sandlot-agent", &ds)
		hasArg(t, ds.Spec.Template.Spec.InitContainers[0].Args, tc.want)
		hasArg(t, ds.Spec.Template.Spec.Containers[0].Lifecycle.PreStop.Exec.Command, tc.want)
	}
}
