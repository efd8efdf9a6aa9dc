#!/usr/bin/env bash
# Build the reference server's test image for `--impl docker:IMAGE`, with no registry:
#
#   tools/build_test_image.sh [IMAGE]      (default: lifecycle-harness/reference:test)
#
# 1. a base image (Debian bookworm minbase + python3, from the Debian archive by
#    debootstrap, imported with `docker import`), built once and kept as BASE;
# 2. the project's `harness` and `reference_impl` packages copied into /opt/lh of a
#    container of BASE and committed as IMAGE, whose command is the reference server.
# IMAGE carries the label lifecycle-harness.source=<hash of the copied sources>; when an
# IMAGE with the same hash exists nothing is done, so a CI rerun costs one `docker inspect`.
# LH_REBUILD=1 rebuilds both. Needs root (debootstrap), `docker` and a running engine.
set -euo pipefail
IMAGE="${1:-lifecycle-harness/reference:test}"
BASE="${LH_BASE_IMAGE:-lifecycle-harness/bookworm-python:base}"
MIRROR="${LH_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PROJECT="$(cd "$(dirname "$0")/.." && pwd)"

sources_hash() {
  (cd "$PROJECT" && find harness reference_impl -type f ! -path '*/__pycache__/*' ! -name '*.pyc' \
     -print0 | LC_ALL=C sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-16
}
HASH="$(sources_hash)"
if [ "${LH_REBUILD:-0}" != 1 ] && [ "$(docker image inspect --format \
     '{{index .Config.Labels "lifecycle-harness.source"}}' "$IMAGE" 2>/dev/null)" = "$HASH" ]; then
  echo "build_test_image: $IMAGE is up to date (sources $HASH)"
  exit 0
fi

if [ "${LH_REBUILD:-0}" = 1 ] || ! docker image inspect "$BASE" >/dev/null 2>&1; then
  command -v debootstrap >/dev/null || { echo "build_test_image: debootstrap is not installed" >&2; exit 2; }
  ROOTFS="$(mktemp -d /tmp/lh-rootfs.XXXXXX)"
  trap 'rm -rf "$ROOTFS"' EXIT
  echo "build_test_image: debootstrap bookworm into $ROOTFS (about a minute)"
  debootstrap --variant=minbase --include=python3 bookworm "$ROOTFS" "$MIRROR" >/tmp/lh-debootstrap.log 2>&1 \
    || { echo "build_test_image: debootstrap failed, see /tmp/lh-debootstrap.log" >&2; exit 1; }
  rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
  tar -C "$ROOTFS" -c . | docker import - "$BASE" >/dev/null
  rm -rf "$ROOTFS"
  trap - EXIT
fi

SRC="$(mktemp -d /tmp/lh-src.XXXXXX)"
CID="$(docker create "$BASE" /bin/true)"
trap 'docker rm -f "$CID" >/dev/null 2>&1 || true; rm -rf "$SRC"' EXIT
mkdir "$SRC/lh"
tar -C "$PROJECT" --exclude=__pycache__ --exclude='*.pyc' -c harness reference_impl | tar -C "$SRC/lh" -x
chmod -R a+rX "$SRC/lh"  # the container runs as the harness's uid, not root
tar -C "$SRC" --owner=0 --group=0 -c lh | docker cp - "$CID:/opt"
docker commit \
  --change 'WORKDIR /opt/lh' \
  --change 'ENV PYTHONPATH=/opt/lh PYTHONDONTWRITEBYTECODE=1' \
  --change "LABEL lifecycle-harness.source=$HASH" \
  --change 'CMD ["python3", "-m", "reference_impl.remote"]' \
  "$CID" "$IMAGE" >/dev/null
echo "build_test_image: built $IMAGE (sources $HASH)"
