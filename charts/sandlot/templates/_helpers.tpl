{{/* Labels every object carries. */}}
{{- define "sandlot.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: sandlot
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/* Selector labels of a component: (dict "ctx" $ "name" "sandlot-agent"). */}}
{{- define "sandlot.selector" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- end }}

{{/* All labels of a component's objects. */}}
{{- define "sandlot.componentLabels" -}}
{{ include "sandlot.labels" .ctx }}
app.kubernetes.io/name: {{ .name }}
{{- end }}

{{/* A component's image: (dict "ctx" $ "image" .Values.agent.image). */}}
{{- define "sandlot.image" -}}
{{ with .ctx.Values.image.registry }}{{ . }}/{{ end }}{{ .image.repository }}:{{ .image.tag | default .ctx.Chart.AppVersion }}
{{- end }}

{{/* The rules of a generated ClusterRole in files/ (make manifests copies them from config/). */}}
{{- define "sandlot.rules" -}}
{{- $role := .ctx.Files.Get .file | fromYaml -}}
{{- if not $role.rules -}}
{{- fail (printf "%s holds no rules: run make manifests" .file) -}}
{{- end -}}
{{ toYaml $role.rules }}
{{- end }}

{{/* The store directory on the nodes. */}}
{{- define "sandlot.storeDir" -}}
{{ .Values.node.storeDir | default (printf "%s/store" .Values.node.dataDir) }}
{{- end }}

{{/*
The host directory the agent mounts for a node path: the path up to its
first part holding a $(VAR) (the kubelet expands those in args, never in
a hostPath), mounted at the same path so that a directory the agent hands
to a shim means the same on the host.
*/}}
{{- define "sandlot.mountRoot" -}}
{{- $root := regexReplaceAll "/[^/]*\\$\\(.*$" . "" -}}
{{- if or (not $root) (not (hasPrefix "/" $root)) -}}
{{- fail (printf "node path %q: want an absolute path whose first part is not a $(VAR)" .) -}}
{{- end -}}
{{ $root }}
{{- end }}

{{/* The mount roots of a list of node paths as JSON, one per tree (nested ones dropped). */}}
{{- define "sandlot.hostRoots" -}}
{{- $all := list -}}
{{- range . -}}
{{- $all = append $all (include "sandlot.mountRoot" .) -}}
{{- end -}}
{{- $kept := list -}}
{{- range $r := sortAlpha (uniq $all) -}}
{{- $nested := false -}}
{{- range $k := $kept -}}
{{- if or (eq $k "/") (hasPrefix (printf "%s/" $k) $r) -}}
{{- $nested = true -}}
{{- end -}}
{{- end -}}
{{- if not $nested -}}
{{- $kept = append $kept $r -}}
{{- end -}}
{{- end -}}
{{- toJson $kept -}}
{{- end }}

{{/*
Flags of `sandlot-agent install` and `uninstall` (the same, so that
uninstall removes what install wrote), restart command excluded.
*/}}
{{- define "sandlot.installArgs" -}}
{{- $a := .Values.agent -}}
{{- $n := .Values.node -}}
- --host-root=/host
- {{ printf "--shim-src=%v" ($a.install.source.shim) | quote }}
- {{ printf "--shim=%v" ($n.shimPath) | quote }}
- {{ printf "--kernel-src=%v" ($a.install.source.kernel) | quote }}
- {{ printf "--kernel=%v/vm/vmlinux" ($n.dataDir) | quote }}
- {{ printf "--initrd-src=%v" ($a.install.source.initrd) | quote }}
- {{ printf "--initrd=%v/vm/initramfs.cpio.gz" ($n.dataDir) | quote }}
- {{ printf "--shim-config=%v" ($n.shimConfigPath) | quote }}
- {{ printf "--sandlot-root=%v" ($n.runDir) | quote }}
- {{ printf "--image-dir=%v/images" ($n.dataDir) | quote }}
- {{ printf "--disk-dir=%v/vms" ($n.dataDir) | quote }}
- {{ printf "--vm-uid-first=%d" (int $n.vmUIDs.first) | quote }}
- {{ printf "--vm-uid-count=%d" (int $n.vmUIDs.count) | quote }}
- {{ printf "--vmm-group=%d" (int $n.vmmGroup) | quote }}
- {{ printf "--memory-dir=%v" ($n.memoryDir) | quote }}
- {{ printf "--modules=%v" ($a.install.guestModules) | quote }}
- {{ printf "--deny-out=%v" (join "," .Values.network.denyOut) | quote }}
{{- with .Values.network.openOut }}
- {{ printf "--open-out=%v" (join "," .) | quote }}
{{- end }}
{{- with .Values.network.ingressFrom }}
- {{ printf "--ingress-from=%v" (join "," .) | quote }}
{{- end }}
{{- if .Values.network.ingressOpen }}
- --ingress-open
{{- end }}
{{- with .Values.network.upstreamCAFile }}
- {{ printf "--upstream-ca-file=%v" (.) | quote }}
{{- end }}
{{- with .Values.network.resolveWhenClosed }}
- {{ printf "--resolve-when-closed=%v" (join "," .) | quote }}
{{- end }}
{{- if $n.qemu }}
- {{ printf "--qemu=%v" $n.qemu | quote }}
{{- else }}
- {{ printf "--qemu-src=%v" $a.install.source.qemu | quote }}
- {{ printf "--qemu-dir=%v/qemu" $n.dataDir | quote }}
{{- end }}
{{- with $a.accel }}
- {{ printf "--accel=%v" (.) | quote }}
{{- end }}
{{- with .Values.volumes.hostPath }}
- {{ printf "--volume-dir=%v" (.) | quote }}
- {{ printf "--volume-owner=%d" (int $.Values.volumes.ownerUID) | quote }}
{{- end }}
{{- with $n.defaultMemoryMiB }}
- {{ printf "--default-memory-mib=%d" (int .) | quote }}
{{- end }}
{{- with $n.defaultVCPU }}
- {{ printf "--default-vcpu=%d" (int .) | quote }}
{{- end }}
{{- with $n.layerMiB }}
- {{ printf "--layer-mib=%d" (int .) | quote }}
{{- end }}
{{- if hasKey $n "shimMemoryMaxMiB" }}
- {{ printf "--shim-memory-max-mib=%d" (int $n.shimMemoryMaxMiB) | quote }}
{{- end }}
{{- if $a.registerRuntime }}
- {{ printf "--containerd-config=%v" ($a.containerd.configPath) | quote }}
- {{ printf "--containerd-dropin=%v" ($a.containerd.dropInPath) | quote }}
{{- if $a.containerd.runtimePath }}
- --runtime-path
{{- end }}
- --
{{- range $a.containerd.restartCommand }}
- {{ . | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* The agent's store flags for storage.mode. */}}
{{- define "sandlot.storeArgs" -}}
{{- $s := .Values.storage -}}
- {{ printf "--store=%v" ($s.mode) | quote }}
{{- if eq $s.mode "juicefs" }}
{{- /* The link the sandlot-store pod writes to its own volume (store-holder.yaml). */}}
- {{ printf "--juicefs-dir=%v/*/mount" (include "sandlot.storeLink" .) | quote }}
{{- with $s.juicefs.stagingDir }}
- {{ printf "--juicefs-staging-dir=%v" (.) | quote }}
{{- end }}
{{- with $s.juicefs.metricsURL }}
- {{ printf "--juicefs-metrics-url=%v" (.) | quote }}
{{- end }}
- {{ printf "--juicefs-upload-deadline=%v" ($s.juicefs.uploadDeadline) | quote }}
{{- if $s.juicefs.verifyContent }}
- --juicefs-verify-content
{{- end }}
{{- else }}
- {{ printf "--store-dir=%v" (include "sandlot.storeDir" .) | quote }}
{{- end }}
{{- if eq $s.mode "s3" }}
- {{ printf "--s3-endpoint=%v" ($s.s3.endpoint) | quote }}
- {{ printf "--s3-bucket=%v" ($s.s3.bucket) | quote }}
- {{ printf "--s3-upload-deadline=%v" ($s.s3.uploadDeadline) | quote }}
{{- /* int64: a large YAML number is a float64 and %v would print 1e+11 */}}
- {{ printf "--s3-cache-max-bytes=%d" (int64 ($s.s3.cacheMaxBytes | default 0)) | quote }}
- {{ printf "--s3-cache-max-disk-percent=%d" (int64 $s.s3.cacheMaxDiskPercent) | quote }}
{{- with $s.s3.prefix }}
- {{ printf "--s3-prefix=%v" (.) | quote }}
{{- end }}
{{- with $s.s3.region }}
- {{ printf "--s3-region=%v" (.) | quote }}
{{- end }}
{{- if $s.s3.insecure }}
- --s3-insecure
{{- end }}
{{- end }}
{{- end }}

{{/* The Secret with the s3 store's credentials. */}}
{{- define "sandlot.s3Secret" -}}
{{ .Values.storage.s3.existingSecret | default "sandlot-s3" }}
{{- end }}

{{/* The API keys Secret (in api.namespace). */}}
{{- define "sandlot.apiKeysSecret" -}}
{{ .Values.api.keys.existingSecret | default "sandlot-api-keys" }}
{{- end }}

{{/* juicefs: the link to the sandlot-store pod's CSI volumes directory, on the node. */}}
{{- define "sandlot.storeLink" -}}
{{ printf "%s/store-volume" .Values.node.runDir }}
{{- end }}

{{- /* The QEMU binary the shims run: node.qemu, or the image's bundle where the agent's install step puts it. */ -}}
{{- define "sandlot.qemu" -}}
{{- $n := .Values.node -}}
{{- if $n.qemu -}}
{{- $n.qemu -}}
{{- else if .Values.agent.install.enabled -}}
{{- printf "%s/qemu/bin/qemu-system-x86_64" $n.dataDir -}}
{{- else -}}
{{- fail "node.qemu: with agent.install.enabled=false nothing installs the image's QEMU: name the nodes' QEMU (e.g. /usr/bin/qemu-system-x86_64)" -}}
{{- end -}}
{{- end -}}
