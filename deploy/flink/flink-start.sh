#!/usr/bin/env bash
# Entry point of deploy/flink/Dockerfile: `jobmanager`, `taskmanager` or `service` (the demo
# enrichment service). Writes $FLINK_CONF_DIR/config.yaml from FLINK_PROPERTIES and every
# /run/secrets/flink-*.yaml, enables the plugins ENABLE_BUILT_IN_PLUGINS names (jar names in
# /opt/flink-opt or the wheel's plugins/, `;`-separated, as Flink's official image does), then execs the process in
# the foreground so that `docker stop` reaches it.
set -euo pipefail
role=${1:?usage: flink-start.sh jobmanager|taskmanager|service}
if [ "$role" = service ]; then
  exec /opt/venv/bin/python -m pipelines_dev.enrichment_service \
    --host 0.0.0.0 --port 8080 --latency "${ENRICHMENT_LATENCY:-20ms}"
fi
mkdir -p "$FLINK_CONF_DIR" "$FLINK_PLUGINS_DIR"
for f in log4j-console.properties log4j-cli.properties logback-console.xml; do
  if [ -f "$FLINK_HOME/conf/$f" ]; then cp "$FLINK_HOME/conf/$f" "$FLINK_CONF_DIR/"; fi
done
# Keep every process's environment (its secrets) out of the logs (pipelines.flink.compat's
# QUIET_ENVIRONMENT_LOGS): Beam logs a Python worker's, the TaskManager's own, as it closes.
for f in log4j-console.properties log4j-cli.properties; do
  cat >> "$FLINK_CONF_DIR/$f" <<'EOF'
logger.pythonenv.name = org.apache.flink.client.python.PythonEnvUtils
logger.pythonenv.level = WARN
logger.workerenv.name = org.apache.beam.runners.fnexecution.control.DefaultJobBundleFactory
logger.workerenv.level = ERROR
EOF
done
umask 077  # the config holds the object store's secret key
printf '%s\n' "${FLINK_PROPERTIES:-}" > "$FLINK_CONF_DIR/config.yaml"
for secret in /run/secrets/flink-*.yaml; do
  if [ -f "$secret" ]; then cat "$secret" >> "$FLINK_CONF_DIR/config.yaml"; fi
done
IFS=';' read -r -a plugins <<< "${ENABLE_BUILT_IN_PLUGINS:-}"
for jar in "${plugins[@]}"; do
  if [ -z "$jar" ]; then continue; fi
  # /opt/flink-opt (the S3 plugin), else the plugins the wheel ships (metrics reporters)
  src="/opt/flink-opt/$jar"
  if [ ! -f "$src" ]; then src=$(find "$FLINK_HOME/plugins" -name "$jar" -print -quit); fi
  if [ -z "$src" ] || [ ! -f "$src" ]; then
    echo "ENABLE_BUILT_IN_PLUGINS: no $jar in /opt/flink-opt or $FLINK_HOME/plugins" >&2
    exit 2
  fi
  mkdir -p "$FLINK_PLUGINS_DIR/${jar%.jar}"
  ln -sf "$src" "$FLINK_PLUGINS_DIR/${jar%.jar}/$jar"
done
case "$role" in
  jobmanager) exec "$FLINK_HOME/bin/jobmanager.sh" start-foreground ;;
  taskmanager) exec "$FLINK_HOME/bin/taskmanager.sh" start-foreground ;;
  *) echo "unknown role $role" >&2; exit 2 ;;
esac
