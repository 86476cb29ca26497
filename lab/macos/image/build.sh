#!/usr/bin/env bash
# Build the Mac-shaped lab node's image FROM the lab node image (lab/image/build.sh builds
# that first): docs/lab.md, "The Mac-shaped node", says what it copies from macOS.
#
#   lab/macos/image/build.sh            build if missing or if the build inputs changed
#   lab/macos/image/build.sh --force    rebuild anyway
#
# Environment:
#   LAB_MAC_IMAGE   image tag (default: lab/macos/node.py's IMAGE)
#   LAB_IMAGE       the base image (default localhost/coordinator-lab-node:bookworm)
#   PYENV_ROOT      where the pyenv builds are (default /root/.pyenv): 3.9 is the Command
#                   Line Tools' /usr/bin/python3, 3.12 the offline bottle of python@3.12
#
# Cached like the base image: the label coordinator.lab.inputs is the SHA-256 of every input
# (these files, launchd's stand-in, the Ollama stand-in, the base image's own label, the
# Python builds' versions, the facts of lab/macos/node.py); the same label means nothing to do.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$repo/lab/containers.conf}"
base="${LAB_IMAGE:-localhost/coordinator-lab-node:bookworm}"  # lab/image/build.sh's default
pyenv_root="${PYENV_ROOT:-/root/.pyenv}"
force=0
[ "${1:-}" = "--force" ] && force=1

log() { printf '==> %s\n' "$*" >&2; }
die() { printf '%s\n' "$*" >&2; exit 1; }

python="$repo/.venv/bin/python"
[ -x "$python" ] || python=python3
image="${LAB_MAC_IMAGE:-$(cd "$repo" && "$python" -m lab.macos.node image)}"
# The user, uid, group and paths: one source, lab/macos/node.py.
build_env="$(cd "$repo" && "$python" -m lab.macos.node build-env)"
eval "$build_env"

# The newest pyenv build of a minor version (e.g. 3.9 -> .../versions/3.9.18).
pyenv_build() {
  local found
  found="$(find "$pyenv_root/versions" -maxdepth 1 -name "$1.*" 2>/dev/null | sort -V | tail -1)"
  [ -n "$found" ] && [ -x "$found/bin/python$1" ] \
    || die "lab/macos/image/build.sh: no pyenv build of Python $1 in $pyenv_root/versions (the Mac node's /usr/bin/python3 is 3.9, its python@3.12 bottle 3.12: pyenv install $1)"
  echo "$found"
}
py39="$(pyenv_build 3.9)"
py312="$(pyenv_build 3.12)"
command -v patchelf >/dev/null || die "lab/macos/image/build.sh: patchelf is missing (apt-get install patchelf)"
command -v cc >/dev/null || die "lab/macos/image/build.sh: cc is missing (apt-get install gcc)"

# launchd's stand-in and its client (lab/macos/README.md), and the Ollama stand-in.
launchd_files=("$repo"/lab/macos/launchd.py "$repo"/lab/macos/launchd_protocol.py
  "$repo"/lab/macos/launchctl "$repo"/lab/macos/localnet_deny.c)
standin_files=("$repo"/lab/standins/ollama.py "$repo"/lab/standins/standin_core.py
  "$repo"/files/coordinator_contract.py)
for file in "${launchd_files[@]}" "${standin_files[@]}"; do
  [ -f "$file" ] || die "lab/macos/image/build.sh: $file is missing"
done
# The version the Ollama stand-in reports is the version of its "bottle".
ollama_version="$(sed -n 's/.*Setting("ollama_version", "\([^"]*\)".*/\1/p' \
  "$repo/lab/standins/ollama.py")"
[ -n "$ollama_version" ] || die "lab/macos/image/build.sh: no ollama_version in lab/standins/ollama.py"

image_label() {
  podman image inspect --format '{{ index .Labels "coordinator.lab.inputs" }}' "$1" 2>/dev/null || true
}

# The base image first (cached by its own script).
LAB_IMAGE="$base" "$repo/lab/image/build.sh"

inputs_hash() {
  {
    find "$here" -type f -print0 | sort -z | xargs -0 cat
    cat "${launchd_files[@]}" "${standin_files[@]}"
    image_label "$base"
    printf '%s\n' "$build_env" "$py39" "$py312" "$ollama_version"
  } | sha256sum | cut -d' ' -f1
}
want="$(inputs_hash)"

if [ "$force" -eq 0 ] && [ "$(image_label "$image")" = "$want" ]; then
  log "image $image is up to date (inputs $want)"
  exit 0
fi

start=$SECONDS
context="$(mktemp -d /var/tmp/coordinator-lab-mac.XXXXXX)"
# shellcheck disable=SC2064
trap "rm -rf '$context'" EXIT

# A pyenv build is a shared-library build whose RUNPATH names its own prefix
# (/root/.pyenv/versions/X/lib); relocated, the interpreter finds libpython through
# $ORIGIN instead. The test suites (a third of the size) are left out.
# Its scripts (pip3, pydoc3, ...) name the interpreter by its pyenv path: they get the path
# the copy has in the image.
copy_python() {
  local from="$1" to="$2" version="$3" final="$4"
  mkdir -p "$to"
  tar -C "$from" --exclude="lib/python$version/test" --exclude="lib/python$version/*/tests" \
    --exclude="lib/python$version/idlelib/idle_test" -c . | tar -C "$to" -x
  # shellcheck disable=SC2016
  patchelf --set-rpath '$ORIGIN/../lib' "$to/bin/python$version"
  grep -rlZ --binary-files=without-match "^#!$from/bin/" "$to/bin" \
    | xargs -0 -r sed -i "1s|^#!$from/bin/|#!$final/bin/|"
}
log "copying Python $(basename "$py39") (Command Line Tools) and $(basename "$py312") (bottle)"
copy_python "$py39" "$context/clt-python" 3.9 "$CLT_PYTHON"
py312_version="$(basename "$py312")"
copy_python "$py312" "$context/bottles/python@3.12/$py312_version" 3.12 \
  "/opt/homebrew/Cellar/python@3.12/$py312_version"

# The ollama "bottle" and Ollama.app: the launcher and the stand-in it runs.
ollama_keg="$context/bottles/ollama/$ollama_version"
mkdir -p "$ollama_keg/bin" "$ollama_keg/libexec"
install -m 0755 "$here/files/ollama_launcher.py" "$ollama_keg/bin/ollama"
install -m 0644 "${standin_files[@]}" "$ollama_keg/libexec/"
app="$context/apps/Ollama.app/Contents"
mkdir -p "$app/Resources" "$app/libexec"
install -m 0755 "$here/files/ollama_launcher.py" "$app/Resources/ollama"
install -m 0644 "${standin_files[@]}" "$app/libexec/"

# launchd's stand-in, its client and the Local Network shim (built here: the image has no
# compiler, as a Mac without the Command Line Tools' clang in use).
mkdir -p "$context/lab-macos"
install -m 0644 "$repo/lab/macos/launchd.py" "$repo/lab/macos/launchd_protocol.py" \
  "$context/lab-macos/"
install -m 0755 "$repo/lab/macos/launchctl" "$context/lab-macos/launchctl"
cc -shared -fPIC -O2 -o "$context/lab-macos/localnet_deny.so" "$repo/lab/macos/localnet_deny.c" -ldl

cp -a "$here/files" "$context/files"
cp "$here/Containerfile" "$context/Containerfile"

log "building $image FROM $base"
build_args=()
while IFS= read -r line; do
  key="${line%%=*}"
  build_args+=(--build-arg "$key=${!key}")
done <<<"$build_env"
podman build --pull=never -t "$image" --label "coordinator.lab.inputs=$want" \
  --build-arg "BASE=$base" --build-arg "PY312_VERSION=$py312_version" \
  --build-arg "OLLAMA_VERSION=$ollama_version" "${build_args[@]}" \
  -f "$context/Containerfile" "$context" >&2
log "built $image in $((SECONDS - start)) s ($(podman image inspect --format '{{.Size}}' "$image" | numfmt --to=si)B)"
