# Sourced by scripts/docker_smoke.sh and scripts/fleet_smoke.sh (bash, set -euo pipefail, from
# the repository root): `step` and `fail` (messages prefixed with the script's name), a Docker
# engine and rankd's images, from nothing but Debian's mirror. Run as root on a Debian 12
# machine: installs docker.io, docker-compose and debootstrap if missing, starts dockerd if none
# answers, and makes the base images debian:12 and debian:12-slim with debootstrap (from the
# mirror apt uses) if absent. Nothing from Docker Hub.
# Caches: the base images and image layers in /var/lib/docker, ccache in a BuildKit cache mount.

start=$SECONDS
step() { echo "$(basename "$0" .sh): [$((SECONDS - start)) s] $*" >&2; }
fail() { echo "$(basename "$0" .sh): FAIL: $*" >&2; exit 1; }

RANKD_EXTRA_PACKAGES="docker.io docker-compose debootstrap ${RANKD_EXTRA_PACKAGES:-}" \
  scripts/install-deps.sh
export DOCKER_BUILDKIT=1
# Debian's docker.io builds with BuildKit by itself; a newer client in front of it on PATH may
# want a buildx plugin that is not there.
docker=docker
if ! docker buildx version >/dev/null 2>&1 && [[ -x /usr/bin/docker ]]; then docker=/usr/bin/docker; fi

if ! $docker info >/dev/null 2>&1; then
  step "starting dockerd (log: /var/log/rankd-dockerd.log)"
  dockerd >/var/log/rankd-dockerd.log 2>&1 &
  for _ in $(seq 60); do $docker info >/dev/null 2>&1 && break; sleep 1; done
  $docker info >/dev/null 2>&1 || fail "dockerd did not start (/var/log/rankd-dockerd.log)"
fi

if ! $docker image inspect debian:12 >/dev/null 2>&1; then
  # The first non-security bookworm mirror of apt's sources, one-line (.list) or deb822
  # (.sources) style. Only the files that exist: a fresh Debian 12 has no /etc/apt/sources.list,
  # and a missing file made sed fail, which pipefail turned into a silent exit of this script.
  sources=()
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    if [[ -f $f ]]; then sources+=("$f"); fi
  done
  ((${#sources[@]})) || fail "no apt sources (/etc/apt/sources.list, /etc/apt/sources.list.d/)"
  mirror=$(sed -n 's/^deb \(\[[^]]*\] \)\?\(http[^ ]*\) bookworm .*/\2/p; s/^URIs: *\(http[^ ]*\).*/\1/p' \
             "${sources[@]}" | grep -v security | head -n 1 || true)
  [[ -n $mirror ]] || fail "no Debian mirror found in /etc/apt/sources.list*"
  step "making debian:12 with debootstrap from $mirror"
  root=$(mktemp -d)
  debootstrap --variant=minbase bookworm "$root" "$mirror" >/dev/null
  tar -C "$root" -c . | $docker import - debian:12 >/dev/null
  rm -rf "$root"
fi
if ! $docker image inspect debian:12-slim >/dev/null 2>&1; then
  $docker tag debian:12 debian:12-slim
fi

# build_image DOCKERFILE TAG: docker/DOCKERFILE as TAG, from the repository root. A rebuild with
# nothing changed takes seconds (every layer cached). RANKD_JOBS: compile jobs (default: every
# core). The commit goes in as RANKD_COMMIT (rankd_build_info): the build context has no .git.
build_image() {
  step "building $2"
  $docker build --network host --build-arg "RANKD_JOBS=${RANKD_JOBS:-}" \
    --build-arg "RANKD_COMMIT=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)" \
    -f "docker/$1" -t "$2" . >&2
}
