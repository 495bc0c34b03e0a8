#!/usr/bin/env bash
# Entry point of deploy/seaweedfs/Dockerfile: master, volume server, filer and the S3
# gateway in one process, data under /data. The S3 gateway takes only the identities of
# /run/secrets/s3.json (mounted read-only); everything else listens inside the container's
# network namespace only. exec, so `docker stop`'s SIGTERM reaches weed.
set -euo pipefail
mkdir -p /data
exec /usr/local/bin/weed server -dir=/data -ip=127.0.0.1 -ip.bind=0.0.0.0 \
  -master.volumeSizeLimitMB=256 -volume.max=32 \
  -filer -s3 -s3.port=8333 -s3.config=/run/secrets/s3.json
