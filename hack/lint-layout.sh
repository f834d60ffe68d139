#!/usr/bin/env bash
# The layout rules of CONTRIBUTING.md that a command can check; `make lint`
# runs this after gofmt and go vet. Each check prints its violations and the
# script fails if any check found one:
#   test-imports   no package outside test/ imports a test/ package (its
#                  _test.go files may: test/ holds the test helpers); the
#                  tooling product targets run is in internal/
#   shim-agent     shim/ and nodeagent/ never depend on each other, tests
#                  included (they share api/node)
#   api            api/ imports nothing of the module outside api/ (its tests:
#                  api/ and test/ only)
#   snapshot       api/snapshot (the snapshot format) imports the standard
#                  library only
#   store          nodeagent/store depends on neither vm/ nor api/v1alpha1,
#                  tests included (it has api/snapshot and its own
#                  RemoteState; the agent maps that to the API)
#   controllers    the packages under controllers/ import only packages before
#                  them in CONTROLLERS_ORDER, and none has over 2,500 non-test
#                  lines
#   file-length    non-test, non-generated .go files <= 500 lines, unless a
#                  `// long: <why>` comment comes before the package clause
#   func-length    functions in those files <= 60 lines (the `func` line to
#                  its closing brace), unless the comment right above the func
#                  contains `long:` followed by why
#   commits        with LINT_BASE set (a ref), each subject of the commits in
#                  LINT_BASE..HEAD is <= 72 characters; unset: skipped
# What broke a rule when the rule came in is allowlisted below; an entry goes
# when its code is fixed (the script says when an entry is no longer needed).
set -euo pipefail
cd "$(dirname "$0")/.."

# Packages outside test/ that import a test/ package ("<pkg> <import>").
# None: the tooling that product targets run (`make up`, `make image`) lives
# in internal/.
ALLOW_TEST_IMPORTS="
"
# Files over 500 lines (path).
ALLOW_LONG_FILES="
internal/cluster/pki.go
"
# Functions over 60 lines (path name, name as Type.Method or Func).
ALLOW_LONG_FUNCS="
"

MOD="$(go list -m)"
failed=()
fail() { # fail <check> <message>
	echo "lint-layout: $1: $2" >&2
	[[ " ${failed[*]} " == *" $1 "* ]] || failed+=("$1")
}
allowed() { # allowed <list> <entry>
	grep -qxF -- "$2" <<<"$1"
}
stale() { # stale <list> <entries found>: allowlist entries nothing needs now
	local e
	while read -r e; do
		[[ -z "$e" ]] && continue
		grep -qxF -- "$e" <<<"$2" || echo "lint-layout: note: allowlist entry no longer needed, remove it: $e" >&2
	done <<<"$1"
}

# pkgimports <format field...>: "<pkg> <imported pkg>" per module-internal import,
# paths relative to the module ("." for its root).
pkgimports() {
	local fields="" f
	for f in "$@"; do fields+="{{range .$f}}{{\$.ImportPath}} {{.}}{{\"\\n\"}}{{end}}"; done
	go list -e -f "$fields" ./... |
		awk -v m="$MOD" 'function rel(p) { return p == m ? "." : substr(p, length(m) + 2) }
			index($1, m) == 1 && ($2 == m || index($2, m "/") == 1) { print rel($1), rel($2) }' |
		sort -u
}
under() { # under <dir>: filter "<pkg> <import>" lines keeping pkgs in dir
	awk -v d="$1" '$1 == d || index($1, d "/") == 1'
}
imports_under() { # imports_under <dir>: keep lines whose import is in dir
	awk -v d="$1" '$2 == d || index($2, d "/") == 1'
}

prod="$(pkgimports Imports)"
tests="$(pkgimports TestImports XTestImports)"

# test-imports
found="$(awk '$1 != "test" && index($1, "test/") != 1' <<<"$prod" | imports_under test)"
while read -r line; do
	[[ -z "$line" ]] && continue
	allowed "$ALLOW_TEST_IMPORTS" "$line" ||
		fail test-imports "${line% *} imports ${line#* } (test/ holds tests only; tooling goes in internal/)"
done <<<"$found"
stale "$ALLOW_TEST_IMPORTS" "$found"

# shim-agent: direct imports; when there is none, through another package.
for pair in "shim nodeagent" "nodeagent shim"; do
	set -- $pair
	found="$(printf '%s\n%s\n' "$prod" "$tests" | under "$1" | imports_under "$2" | sort -u)" verb=imports
	if [[ -z "$found" ]]; then
		verb="depends (through another package) on"
		found="$(go list -e -test -deps "./$1/..." |
			awk -v m="$MOD" -v d="$2" '$1 == m "/" d || index($1, m "/" d "/") == 1 { print "./'"$1"'/... " substr($1, length(m) + 2) }' |
			sort -u)"
	fi
	while read -r line; do
		[[ -z "$line" ]] && continue
		fail shim-agent "${line% *} $verb ${line#* } ($1/ and $2/ share api/node only; go list -test -deps ./$1/...)"
	done <<<"$found"
done

# api
while read -r line; do
	[[ -z "$line" ]] && continue
	fail api "${line% *} imports ${line#* } (api/ imports nothing of the module outside api/)"
done < <(under api <<<"$prod" | awk '$2 != "api" && index($2, "api/") != 1')
while read -r line; do
	[[ -z "$line" ]] && continue
	fail api "${line% *}'s tests import ${line#* } (api/'s tests: api/ and test/ only)"
done < <(under api <<<"$tests" | awk '$2 != "api" && index($2, "api/") != 1 && $2 != "test" && index($2, "test/") != 1')

# snapshot: the format vm/, the shim, the agent and the store share.
while read -r dep; do
	[[ -z "$dep" ]] && continue
	fail snapshot "api/snapshot depends on $dep (the snapshot format uses the standard library only)"
done < <(go list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' ./api/snapshot | grep -vxF "$MOD/api/snapshot")

# store: the snapshot store knows the format, not the VMM or the CRDs.
while read -r dep; do
	[[ -z "$dep" ]] && continue
	fail store "nodeagent/store depends on $dep (it uses api/snapshot and its own RemoteState; go list -test -deps ./nodeagent/store/...)"
done < <(go list -e -test -deps ./nodeagent/store/... |
	awk -v m="$MOD" '{ p = $1 } p == m "/vm" || index(p, m "/vm/") == 1 || p == m "/api/v1alpha1" { print substr(p, length(m) + 2) }' |
	sort -u)

# controllers: layered packages, each of a reviewable size.
CONTROLLERS_ORDER="controllers/index controllers/queue controllers/writes controllers/placement controllers/podspec
controllers/metrics controllers/data controllers/template controllers/sandbox controllers/drain controllers"
rank() { # rank <pkg>: its place in CONTROLLERS_ORDER, or -1
	local i=0 p
	for p in $CONTROLLERS_ORDER; do
		[[ "$p" == "$1" ]] && { echo "$i"; return; }
		i=$((i + 1))
	done
	echo -1
}
while read -r pkg dep; do
	[[ -z "$pkg" ]] && continue
	rp="$(rank "$pkg")" rd="$(rank "$dep")"
	if ((rp < 0)); then
		fail controllers "$pkg is not in CONTROLLERS_ORDER (hack/lint-layout.sh): place it in the layers"
	elif ((rd >= rp)); then
		fail controllers "$pkg imports $dep (controllers/ packages import only the ones before them: $CONTROLLERS_ORDER)"
	fi
done < <(under controllers <<<"$prod" | imports_under controllers)
for dir in $(go list -f '{{.Dir}}' ./controllers/...); do
	n="$(find "$dir" -maxdepth 1 -name '*.go' ! -name '*_test.go' -exec cat {} + | wc -l)"
	((n <= 2500)) || fail controllers "${dir#"$PWD/"} has $n non-test lines (> 2,500: split it by what it owns)"
done

# file-length and func-length, on the files gofmt checks (gofmt puts a
# top-level func's closing brace in column 0).
files=()
while read -r f; do
	[[ -f "$f" ]] || continue
	# generated: the marker line before the package clause
	awk '/^package /{exit} /^\/\/ Code generated .* DO NOT EDIT\.$/{found=1; exit} END{exit !found}' "$f" && continue
	files+=("$f")
done < <(git ls-files --cached --others --exclude-standard '*.go' | grep -v '_test\.go$')
((${#files[@]} > 0)) || { echo "lint-layout: no .go files found" >&2; exit 1; }

found="$(awk '
	FNR == 1 { if (f != "" && n > 500 && !long) print f, n; f = FILENAME; long = 0; pkg = 0 }
	!pkg && /^package / { pkg = 1 }
	!pkg && /^\/\/ long:/ { long = 1 }
	{ n = FNR }
	END { if (f != "" && n > 500 && !long) print f, n }' "${files[@]}")"
while read -r f n; do
	[[ -z "$f" ]] && continue
	allowed "$ALLOW_LONG_FILES" "$f" || fail file-length "$f has $n lines (> 500; split it, or say why above its package clause: // long: ...)"
done <<<"$found"
stale "$ALLOW_LONG_FILES" "$(awk '{ print $1 }' <<<"$found")"

found="$(awk '
	function fname(s,   recv, t) {
		sub(/^func /, "", s)
		if (s ~ /^\(/) { # a method: the receiver type, then the name
			recv = substr(s, 2, index(s, ")") - 2); s = substr(s, index(s, ")") + 1)
			sub(/^ +/, "", s); sub(/\[.*$/, "", recv); t = recv; sub(/^.* /, "", t); sub(/^\*/, "", t)
			sub(/[^A-Za-z0-9_].*$/, "", s); return t "." s
		}
		sub(/[^A-Za-z0-9_].*$/, "", s); return s
	}
	FNR == 1 { infn = 0; cmt = "" }
	!infn && /^\/\// { cmt = cmt "\n" $0; next }
	!infn && /^func / {
		start = FNR; name = fname($0); long = (cmt ~ /long:/); cmt = ""
		if ($0 ~ /}$/) next # one line
		infn = 1; next
	}
	infn && /^}/ { infn = 0; if (FNR - start + 1 > 60 && !long) print FILENAME, name, FNR - start + 1; next }
	!infn { cmt = "" }' "${files[@]}")"
while read -r f name n; do
	[[ -z "$f" ]] && continue
	allowed "$ALLOW_LONG_FUNCS" "$f $name" || fail func-length "$f: $name has $n lines (> 60; split it, or say why in the comment above it: long: ...)"
done <<<"$found"
stale "$ALLOW_LONG_FUNCS" "$(awk '{ print $1, $2 }' <<<"$found")"

# commits
if [[ -n "${LINT_BASE:-}" ]]; then
	while IFS= read -r line; do
		subject="${line#* }"
		if ((${#subject} > 72)); then
			fail commits "${line%% *}: subject has ${#subject} characters (> 72): $subject"
		fi
	done < <(git log --no-merges --format='%h %s' "$LINT_BASE..HEAD")
fi

if ((${#failed[@]} > 0)); then
	echo "lint-layout: failed: ${failed[*]} (rules: CONTRIBUTING.md)" >&2
	exit 1
fi
