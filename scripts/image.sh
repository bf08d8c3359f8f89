#!/usr/bin/env bash
# Builds codehub's OCI image from this tree alone: nothing is pulled, and no
# container engine is needed to build it.
#
#   scripts/image.sh VERSION [NAME]
#
# The image holds the static codehub binary (/codehub, the entrypoint), the
# build machine's CA certificates, /etc/passwd and /etc/group naming the
# user it runs as (codehub, 10001:10001, not root) and a /tmp. It serves
# both as the control plane (`codehub server`, its default command) and as
# the job_image of archive and restore jobs, which run `codehub job …` as
# the workspace user.
#
# It is written as bin/codehub-image-VERSION.tar in the format `docker
# save` writes, which `docker load`, `podman load` and Nomad's docker
# driver (`load`) read, and loaded as NAME:VERSION (NAME defaults to
# codehub) into the engine DOCKER_HOST names when one answers.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=${1:?usage: $0 VERSION [NAME]}
name=${2:-codehub}
arch=$(go env GOARCH)
out=$root/bin/codehub-image-$version.tar
certs=/etc/ssl/certs/ca-certificates.crt
uid=10001

log() { printf 'image: %s\n' "$*" >&2; }

if [ ! -s "$certs" ]; then
	log "no CA certificates at $certs (Debian's ca-certificates package)"
	exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rootfs=$work/rootfs
mkdir -p "$rootfs"/{etc/ssl/certs,tmp,home/codehub} "$work/image"
(cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$rootfs/codehub" ./cmd/codehub)
install -m 0644 "$certs" "$rootfs$certs"
printf 'root:x:0:0:root:/root:/sbin/nologin\ncodehub:x:%d:%d:codehub:/home/codehub:/sbin/nologin\n' "$uid" "$uid" >"$rootfs/etc/passwd"
printf 'root:x:0:\ncodehub:x:%d:\n' "$uid" >"$rootfs/etc/group"
chmod 1777 "$rootfs/tmp"
chown "$uid:$uid" "$rootfs/home/codehub"

# One layer, the same bytes for the same tree: sorted, owned by numbers,
# dated at the epoch.
tar --sort=name --numeric-owner --mtime=@0 --format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
	-C "$rootfs" -cf "$work/layer.tar" .
layer=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
mkdir -p "$work/image/$layer"
mv "$work/layer.tar" "$work/image/$layer/layer.tar"

cat >"$work/config.json" <<JSON
{"architecture":"$arch","os":"linux","created":"1970-01-01T00:00:00Z",
"config":{"User":"$uid:$uid","Entrypoint":["/codehub"],"Cmd":["server"],
"Env":["PATH=/","HOME=/home/codehub","SSL_CERT_FILE=$certs"],"WorkingDir":"/home/codehub",
"ExposedPorts":{"8080/tcp":{}},
"Labels":{"org.opencontainers.image.title":"codehub","org.opencontainers.image.version":"$version"}},
"rootfs":{"type":"layers","diff_ids":["sha256:$layer"]},
"history":[{"created":"1970-01-01T00:00:00Z","created_by":"scripts/image.sh $version"}]}
JSON
config=$(sha256sum "$work/config.json" | cut -d' ' -f1)
mv "$work/config.json" "$work/image/$config.json"
printf '[{"Config":"%s.json","RepoTags":["%s:%s"],"Layers":["%s/layer.tar"]}]\n' \
	"$config" "$name" "$version" "$layer" >"$work/image/manifest.json"
printf '{"%s":{"%s":"%s"}}\n' "$name" "$version" "$layer" >"$work/image/repositories"

mkdir -p "$(dirname "$out")"
tar --sort=name --numeric-owner --owner=0 --group=0 --mtime=@0 -C "$work/image" -cf "$out" .
log "$out: $name:$version, $(du -h "$out" | cut -f1) ($(du -b "$out" | cut -f1) bytes), config sha256:$config"

if command -v docker >/dev/null && docker version >/dev/null 2>&1; then
	docker load -i "$out" >&2
	log "loaded as $name:$version into ${DOCKER_HOST:-the default engine}"
else
	log "no container engine answered: load it with docker load -i $out"
fi
