#!/usr/bin/env bash
# Provides the build stage's Go image (deploy/docker/Dockerfile's
# BATON_GO_IMAGE, a pinned golang image) so the Dockerfile builds on this
# machine: if it is not here, it is pulled; where no registry answers (our
# machines have none), a local image of that name is made instead from
# Debian's packages (busybox-static for a shell, ca-certificates for the Go
# module proxy) and the Go toolchain the host already uses.
source "$(dirname "$0")/lib.sh"
image=$(go_image)
[ -n "$image" ] || { echo "base-image.sh: no BATON_GO_IMAGE default in deploy/docker/Dockerfile" >&2; exit 1; }
if docker image inspect "$image" >/dev/null 2>&1; then exit 0; fi
log "pulling $image"
if timeout 60 docker pull -q "$image" >/dev/null 2>&1; then exit 0; fi

log "no registry answers: making $image locally from Debian's busybox-static, ca-certificates and $(go env GOVERSION)"
want=${image#*:}
want=${want%%-*}
if [ "go$want" != "$(go env GOVERSION)" ]; then
  log "note: the host has $(go env GOVERSION), not go$want; the image gets the host's (go.mod needs $(awk '/^go /{print $2; exit}' "$ROOT/proto/go.mod"))"
fi
for pkg in busybox-static ca-certificates; do
  if ! dpkg -s "$pkg" >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      log "installing $pkg"
      apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >/dev/null
    else
      echo "base-image.sh: Debian's $pkg is needed to make $image here: apt-get install $pkg" >&2
      exit 1
    fi
  fi
done
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/bin" "$root/tmp" "$root/etc/ssl/certs" "$root/root" "$root/go"
chmod 1777 "$root/tmp"
cp /bin/busybox "$root/bin/busybox"
for applet in $(/bin/busybox --list); do
  [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
done
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
goroot=$(go env GOROOT)
# The golang images keep Go in /usr/local/go and GOPATH at /go.
tar -c -C "$root" . -C "$goroot/.." --transform "s,^$(basename "$goroot"),usr/local/go," "$(basename "$goroot")" |
  docker import \
    -c 'ENV PATH=/go/bin:/usr/local/go/bin:/bin' -c 'ENV GOPATH=/go' -c 'ENV GOTOOLCHAIN=local' -c 'WORKDIR /go' \
    - "$image" >/dev/null
log "made $image ($(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%d MB", $1/1e6}'))"
