#!/usr/bin/env bash
# Builds the previous release (a git tag, PREVIOUS_RELEASE, default the
# newest v* tag, or when the checkout has no tags the newest line of
# hack/releases.tsv) the way it was released —
# `make release` in a worktree of the tag — into
# ${SANDLOT_CACHE:-$HOME/.cache/sandlot}/releases/<tag>/ (its release
# folder), and skips the build when that folder exists. make test-upgrade
# installs it, then upgrades to HEAD.
#
# The tag's `make vm-assets` repoints the cache's current guest to its
# own; HEAD's is put back after (cached: seconds). Prints the folder on
# its last line of stdout.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${SANDLOT_CACHE:-$HOME/.cache/sandlot}"
log() { printf '[previous-release %s] %s\n' "$(date +%T)" "$*" >&2; }

RELEASES="$REPO/hack/releases.tsv"
tag="${PREVIOUS_RELEASE:-}"
if [[ -z "$tag" ]]; then
	tag="$(git -C "$REPO" tag --list 'v*' --sort=-version:refname --merged HEAD | head -n1)"
fi
if [[ -z "$tag" ]]; then
	# No tags in this checkout: the newest release the repository records.
	tag="$(grep -v '^#' "$RELEASES" | sort -V -r -k1,1 | head -n1 | cut -f1)"
fi
version="${tag#v}"
OUT="$CACHE/releases/$tag"
if [[ -f "$OUT/SHA256SUMS" ]] && (cd "$OUT" && sha256sum --quiet -c SHA256SUMS); then
	log "$tag present in $OUT"
	echo "$OUT"
	exit 0
fi
rev="$(git -C "$REPO" rev-parse -q --verify "refs/tags/$tag^{commit}" || true)"
if [[ -z "$rev" ]]; then
	rev="$(awk -v t="$tag" '$1 == t { print $2 }' "$RELEASES")"
fi
if [[ -z "$rev" ]]; then
	echo "previous-release: no release ${tag:-v*}: neither a tag in $REPO nor a line in $RELEASES" >&2
	exit 1
fi
have_commit() { git -C "$REPO" cat-file -e "$rev^{commit}" 2>/dev/null; }
if ! have_commit; then
	# A shallow or single-branch clone: ask its remotes for the history.
	for remote in $(git -C "$REPO" remote); do
		log "$tag ($rev) is not in this clone: fetching it from $remote"
		git -C "$REPO" fetch -q --unshallow "$remote" 2>/dev/null ||
			git -C "$REPO" fetch -q "$remote" "$rev" 2>/dev/null || true
		have_commit && break
	done
fi
if ! have_commit; then
	echo "previous-release: $tag is commit $rev, which this clone lacks and no remote gave: clone with history (git fetch --unshallow --tags) or set PREVIOUS_RELEASE to a tag you have" >&2
	exit 1
fi

work="$(mktemp -d /var/tmp/sandlot-release-XXXXXX)"
cleanup() {
	git -C "$REPO" worktree remove --force "$work/src" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
log "$tag: a worktree in $work/src"
git -C "$REPO" worktree add --detach -q "$work/src" "$rev"
start=$SECONDS
log "$tag: make release VERSION=$version (the tag's own build, images and chart)"
make -C "$work/src" release VERSION="$version" >&2
mkdir -p "$(dirname "$OUT")"
rm -rf "$OUT"
mv "$work/src/dist/$version" "$OUT"
log "$tag: built in $((SECONDS - start)) s; putting HEAD's guest back as the cache's current"
"$REPO/hack/vm-assets.sh" >&2
echo "$OUT"
