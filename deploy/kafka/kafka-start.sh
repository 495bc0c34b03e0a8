#!/usr/bin/env bash
# Entry point of deploy/kafka/Dockerfile: KAFKA_* variables -> server.properties, the
# apache/kafka image's naming (KAFKA_LOG_DIRS -> log.dirs; "__" -> "_", "___" -> "-"),
# format once with CLUSTER_ID, then exec the broker so it receives `docker stop`'s SIGTERM.
set -euo pipefail
conf=/opt/kafka/config
props="$conf/server.properties"
mkdir -p "$conf"
: > "$props"
for name in $(compgen -e); do
  case "$name" in
    KAFKA_HEAP_OPTS | KAFKA_OPTS | KAFKA_JVM_PERFORMANCE_OPTS) continue ;;
    KAFKA_*) ;;
    *) continue ;;
  esac
  key="${name#KAFKA_}"
  key="${key,,}"
  key="${key//___/-}"
  key="${key//__/@}"
  key="${key//_/.}"
  key="${key//@/_}"
  printf '%s=%s\n' "$key" "${!name}" >> "$props"
done
: "${CLUSTER_ID:?set CLUSTER_ID (22 base64url characters) to format the log dirs}"
classpath='/opt/kafka/libs/*'
log4j="-Dlog4j2.configurationFile=/opt/kafka/log4j2.properties"
# --ignore-formatted: a restarted container keeps its data.
java -cp "$classpath" "$log4j" kafka.tools.StorageTool format \
  -t "$CLUSTER_ID" -c "$props" --ignore-formatted
# shellcheck disable=SC2086  # heap options are a word list
exec java ${KAFKA_HEAP_OPTS:--Xmx768m} -XX:+UseG1GC -cp "$classpath" "$log4j" kafka.Kafka "$props"
