#!/usr/bin/env bash
# Entry point of deploy/zookeeper/Dockerfile: one standalone server (what Flink's HA needs
# on one machine), its data in /var/lib/zookeeper, only the four-letter words a health
# check uses, no admin HTTP server. exec, so `docker stop`'s SIGTERM reaches the JVM.
set -euo pipefail
conf=/opt/zookeeper/zoo.cfg
cat > "$conf" <<CFG
tickTime=2000
initLimit=10
syncLimit=5
dataDir=/var/lib/zookeeper
clientPort=2181
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr
autopurge.snapRetainCount=3
autopurge.purgeInterval=1
CFG
mkdir -p /var/lib/zookeeper
# shellcheck disable=SC2086  # heap options are a word list
exec java ${ZK_HEAP_OPTS:--Xmx256m} -cp '/opt/zookeeper/libs/*' \
  -Dlog4j2.configurationFile=/opt/zookeeper/log4j2.properties \
  org.apache.zookeeper.server.ZooKeeperServerMain "$conf"
