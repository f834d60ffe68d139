#!/usr/bin/env bash
# The README's quickstart against a running `make up` cluster: apply the
# sample, wait until the Sandbox runs, check the VM answers on its pod IP,
# logs and execs inside the microVM, drive it with the E2B SDK through
# sandlot-api; then run the README's block verbatim (it deletes them).
# CI runs it between `make up` and `make down`.
set -euo pipefail
export KUBECONFIG="${KUBECONFIG:-${SANDLOT_CLUSTER_DIR:-/var/tmp/sandlot-up}/pki/admin.kubeconfig}"
cd "$(dirname "$0")/.."
k() { kubectl "$@" 2> >(grep -v 'Warning: version difference\|websocket.go' >&2); }

k apply -f config/samples/quickstart.yaml -f config/samples/code-interpreter.yaml
for _ in $(seq 1 240); do
	[[ "$(k get sbx hello -o jsonpath='{.status.phase}')" == Running ]] && break
	sleep 0.5
done
k get sbx hello -o wide
ip="$(k get sbx hello -o jsonpath='{.status.podIP}')"
[[ -n "$ip" ]] || { echo "sandbox hello has no pod IP" >&2; exit 1; }
code="$(curl -s -o /dev/null -w '%{http_code}' "http://$ip:49983/health")"
[[ "$code" == 204 ]] || { echo "envd /health at $ip answered $code" >&2; exit 1; }
echo "envd answers at $ip"
k logs hello
guest="$(k exec hello -- uname -r)"
[[ "$guest" != "$(uname -r)" ]] || { echo "kubectl exec ran on the host kernel" >&2; exit 1; }
echo "kubectl exec: guest kernel $guest, host kernel $(uname -r)"
# The E2B SDK, unchanged, through sandlot-api (make up runs it); its default
# template, code-interpreter-v1, is the sample of that name.
dir="${SANDLOT_CLUSTER_DIR:-/var/tmp/sandlot-up}"
(cd test/e2b && npm ci --no-audit --no-fund --silent)
E2B_API_URL="$(cat "$dir/api-url")" E2B_SANDBOX_URL="$(cat "$dir/api-url")" E2B_API_KEY="$(cat "$dir/api-key")" \
	node test/e2b/quickstart.mjs
# Then the README's "Try it" block as it stands (less `make down`, CI's
# next phase): every command a newcomer copies is one CI ran.
readme="$(awk '/^Try it on the `make up` cluster:/ {f = 1} f && /^```sh/ {b = 1; next} b && /^```/ {exit} b' README.md |
	grep -v '^make down')"
[[ "$(wc -l <<<"$readme")" -gt 10 ]] || { echo "README.md's 'Try it' block was not found" >&2; exit 1; }
echo "=== the README's 'Try it' block"
# Each line as written (not as expanded: the API key stays out of the log).
while IFS= read -r line; do
	[[ -z "$line" || "$line" == \#* ]] && continue
	echo "+ $line"
	eval "$line"
done <<<"$readme"
k delete -f config/samples/code-interpreter.yaml --wait
echo "quickstart OK"
