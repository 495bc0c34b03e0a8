#!/usr/bin/env bash
# Entry point of deploy/seaweedfs/Dockerfile: master, volume server, filer and the S3
# gateway in one process, data under /data. The S3 gateway takes only the identities of
# /run/secrets/s3.json (mounted read-only); everything else listens inside the container's
# network namespace only. exec, so `docker stop`'s SIGTERM reaches weed.
# -volume.minFreeSpace: weed's default, 1% of the disk, is 2.5 GB on a 252 GB host disk; a
# CI host with less free made every volume read-only and every checkpoint write fail. The
# store holds checkpoints of a few MB: it stops only when the disk itself is nearly full.
set -euo pipefail
mkdir -p /data
exec /usr/local/bin/weed server -dir=/data -ip=127.0.0.1 -ip.bind=0.0.0.0 \
  -master.volumeSizeLimitMB=256 -volume.max=32 -volume.minFreeSpace=512MiB \
  -filer -s3 -s3.port=8333 -s3.config=/run/secrets/s3.json
