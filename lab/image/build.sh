#!/usr/bin/env bash
# Build the lab node image: Debian 12 (bookworm) with systemd as PID 1, python3 for Ansible.
#
#   lab/image/build.sh            build if missing or if the build inputs changed
#   lab/image/build.sh --force    rebuild anyway
#
# Environment:
#   LAB_IMAGE          image tag (default localhost/coordinator-lab-node:bookworm)
#   LAB_IMAGE_METHOD   auto (default) | containerfile | debootstrap
#                      auto: the Containerfile FROM debian:bookworm when that base image is
#                      already present locally, else debootstrap from the host's Debian mirror
#                      + `podman import`. auto never contacts a container registry (tests and
#                      CI reach only package mirrors); containerfile pulls the base if missing.
#   LAB_MIRROR         Debian mirror for debootstrap (default: the host's apt sources)
#
# The image carries the label coordinator.lab.inputs=<sha256 of the build inputs>; when the tag
# exists with the same label nothing is done. PostgreSQL and Redis are NOT in the image: the
# roles install them, as they do on a real machine. Only the apt package lists are pre-seeded.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$repo/lab/containers.conf}"

image="${LAB_IMAGE:-localhost/coordinator-lab-node:bookworm}"
method="${LAB_IMAGE_METHOD:-auto}"
force=0
[ "${1:-}" = "--force" ] && force=1

# Packages of the node image. python3-apt lets Ansible's apt module run without installing it
# first on every converge; openssh-server and sudo: Ansible logs in over SSH as a user with
# sudo, as on a real host. No acl: the roles must work without it (docs/lab.md).
packages=(python3 python3-apt systemd systemd-sysv dbus procps iproute2 sudo ca-certificates
  openssh-server)

log() { printf '==> %s\n' "$*" >&2; }

# Hash of everything that decides the image's content.
inputs_hash() {
  {
    cat "$here/build.sh" "$here/Containerfile" "$here/finish-rootfs.sh"
    printf '%s\n' "${packages[@]}"
  } | sha256sum | cut -d' ' -f1
}
want="$(inputs_hash)"

if [ "$force" -eq 0 ]; then
  have="$(podman image inspect --format '{{ index .Labels "coordinator.lab.inputs" }}' "$image" \
    2>/dev/null || true)"
  if [ "$have" = "$want" ]; then
    log "image $image is up to date (inputs $want)"
    exit 0
  fi
fi

# The host's Debian mirror, from deb822 sources or the one-line format.
host_mirror() {
  local uri=""
  if [ -r /etc/apt/sources.list.d/debian.sources ]; then
    uri="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)"
  fi
  if [ -z "$uri" ] && [ -r /etc/apt/sources.list ]; then
    uri="$(awk '$1 == "deb" && $0 !~ /security/ {
      for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) {print $i; exit} }' /etc/apt/sources.list)"
  fi
  echo "${uri:-http://deb.debian.org/debian}"
}

base_image_present() {
  podman image exists docker.io/library/debian:bookworm
}

build_containerfile() {
  log "building $image from the Containerfile"
  podman build --pull=missing -t "$image" --label "coordinator.lab.inputs=$want" \
    --build-arg "PACKAGES=${packages[*]}" -f "$here/Containerfile" "$here"
}

build_debootstrap() {
  local mirror="${LAB_MIRROR:-$(host_mirror)}"
  local work rootfs
  command -v debootstrap >/dev/null || { log "debootstrap is missing: apt-get install debootstrap"; exit 1; }
  work="$(mktemp -d /var/tmp/coordinator-lab-image.XXXXXX)"
  rootfs="$work/rootfs"
  # shellcheck disable=SC2064
  trap "rm -rf '$work'" EXIT
  log "debootstrap bookworm from $mirror"
  local IFS=,
  debootstrap --variant=minbase --include="${packages[*]}" bookworm "$rootfs" "$mirror" \
    >"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
  unset IFS
  # The same suites the host uses (bookworm, updates, security), in deb822 form.
  local security="${mirror%/debian}/debian-security"
  rm -f "$rootfs/etc/apt/sources.list"
  cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  # Pre-seed the package lists (converge still refreshes them when older than the cache time).
  cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
  chroot "$rootfs" apt-get update -qq >"$work/apt.log" 2>&1 || log "apt-get update in the image failed; lists stay empty"
  chroot "$rootfs" apt-get clean
  rm -f "$rootfs/etc/resolv.conf" "$rootfs/etc/hostname"
  cp "$here/finish-rootfs.sh" "$rootfs/tmp/finish-rootfs.sh"
  chroot "$rootfs" /bin/sh /tmp/finish-rootfs.sh
  rm -f "$rootfs/tmp/finish-rootfs.sh"
  log "importing into $image"
  tar -C "$rootfs" -c . | podman import \
    --change 'CMD ["/sbin/init"]' \
    --change 'STOPSIGNAL SIGRTMIN+3' \
    --change "LABEL coordinator.lab.inputs=$want" \
    - "$image" >/dev/null
}

start=$SECONDS
case "$method" in
  containerfile) build_containerfile ;;
  debootstrap) build_debootstrap ;;
  auto)
    if base_image_present; then build_containerfile; else
      log "no local debian:bookworm image: building with debootstrap"
      build_debootstrap
    fi
    ;;
  *) log "LAB_IMAGE_METHOD must be auto, containerfile or debootstrap"; exit 2 ;;
esac
log "built $image in $((SECONDS - start)) s"
