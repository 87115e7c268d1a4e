#!/usr/bin/env bash
# Single-node Apache Kafka broker (KRaft, broker+controller in one JVM) on 127.0.0.1,
# built only from Maven Central artifacts (resolved with `mvn`, no other downloads).
#
# Usage: scripts/kafka.sh {start|stop|restart|status|ensure}
#   start   start the broker unless it is already running and answering (idempotent)
#   stop    stop the broker started from this data dir (SIGTERM, wait, SIGKILL after 30 s)
#   status  exit 0 and say so if running and answering, exit 1 otherwise
#   ensure  start if needed, then print the bootstrap address (the only thing on stdout)
#
# Environment (all optional):
#   KAFKA_VERSION          org.apache.kafka:kafka_2.13 version       (default 4.1.2)
#   KAFKA_HOME             jar cache root                             (default ~/.cache/eas-kafka)
#   KAFKA_DATA_DIR         config, data, log and pid file             (default <repo>/.kafka)
#   KAFKA_PORT             PLAINTEXT client port                      (default 9092)
#   KAFKA_CONTROLLER_PORT  KRaft controller port                      (default 9093)
#   KAFKA_HEAP_OPTS        JVM heap flags                             (default -Xmx512m -Xms256m)
#   KAFKA_START_TIMEOUT    seconds to wait for readiness              (default 90)
#   KAFKA_MVN_ARGS         extra mvn arguments, e.g. -Dmaven.repo.local=/some/dir
#
# All diagnostics go to stderr; `ensure` prints only "127.0.0.1:<port>" on stdout.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$SCRIPT_DIR/.." && pwd)"

KAFKA_VERSION="${KAFKA_VERSION:-4.1.2}"
LOG4J_VERSION="${KAFKA_LOG4J_VERSION:-2.25.3}"   # matches log4j-core pulled in by kafka 4.1.2
KAFKA_HOME="${KAFKA_HOME:-$HOME/.cache/eas-kafka}"
KAFKA_PORT="${KAFKA_PORT:-9092}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-9093}"
KAFKA_DATA_DIR="${KAFKA_DATA_DIR:-$REPO_DIR/.kafka}"
KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xmx512m -Xms256m}"
KAFKA_START_TIMEOUT="${KAFKA_START_TIMEOUT:-90}"
KAFKA_HOST=127.0.0.1
BOOTSTRAP="$KAFKA_HOST:$KAFKA_PORT"

VERSION_DIR="$KAFKA_HOME/$KAFKA_VERSION"
LIBS_DIR="$VERSION_DIR/libs"
LIBS_MARKER="$LIBS_DIR/.resolved"

PID_FILE="$KAFKA_DATA_DIR/kafka.pid"
LOG_FILE="$KAFKA_DATA_DIR/kafka.log"
SERVER_PROPS="$KAFKA_DATA_DIR/server.properties"
LOG4J_PROPS="$KAFKA_DATA_DIR/log4j2.properties"
LOG_DIRS="$KAFKA_DATA_DIR/kraft-logs"
LOCK_FILE="$KAFKA_DATA_DIR/.kafka.lock"

CHECK_ERR=""
log() { printf '[kafka.sh] %s\n' "$*" >&2; }
die() { printf '[kafka.sh] ERROR: %s\n' "$*" >&2; exit 1; }

require_tools() {
  command -v java >/dev/null 2>&1 ||
    die "'java' not found on PATH: Kafka $KAFKA_VERSION needs a Java 17+ JRE (e.g. apt-get install openjdk-17-jre-headless)"
  local jv
  jv=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1)
  [[ -z $jv || $jv -ge 17 ]] ||
    die "Kafka $KAFKA_VERSION needs Java 17+, but 'java' on PATH is Java $jv"
  if [[ ! -f "$LIBS_MARKER" ]]; then
    command -v mvn >/dev/null 2>&1 ||
      die "'mvn' not found on PATH: Maven is needed once to fetch Kafka $KAFKA_VERSION from Maven Central (e.g. apt-get install maven)"
  fi
}

# ---------------------------------------------------------------------------------------------
# Jar resolution (once per version; a marker file makes later runs skip Maven entirely)
# ---------------------------------------------------------------------------------------------
resolve_libs() {
  [[ -f "$LIBS_MARKER" ]] && return 0
  mkdir -p "$VERSION_DIR"
  exec 8>"$VERSION_DIR/.resolve.lock"
  flock 8
  if [[ -f "$LIBS_MARKER" ]]; then exec 8>&-; return 0; fi   # another process just did it

  log "resolving org.apache.kafka:kafka_2.13:$KAFKA_VERSION and runtime deps via Maven (first run only) ..."
  local t0=$SECONDS work="$VERSION_DIR/resolve"
  rm -rf "$work" "$LIBS_DIR"
  mkdir -p "$work"
  cat >"$work/pom.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.eas</groupId>
  <artifactId>kafka-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
    <!-- Kafka 4.x logs through slf4j 1.7 -> log4j2; the binding is not a transitive dep -->
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
  </dependencies>
</project>
EOF
  local mvn_log="$work/mvn.log"
  # shellcheck disable=SC2086
  if ! mvn -B -q --no-transfer-progress -f "$work/pom.xml" ${KAFKA_MVN_ARGS:-} \
      org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$work/libs" >"$mvn_log" 2>&1; then
    tail -n 40 "$mvn_log" >&2 || true
    exec 8>&-
    die "Maven could not resolve org.apache.kafka:kafka_2.13:$KAFKA_VERSION (full log: $mvn_log)"
  fi
  local n
  n=$(find "$work/libs" -maxdepth 1 -name '*.jar' | wc -l)
  [[ -f "$work/libs/kafka_2.13-$KAFKA_VERSION.jar" && $n -gt 10 ]] ||
    { exec 8>&-; die "Maven finished but $work/libs looks incomplete ($n jars)"; }
  mv "$work/libs" "$LIBS_DIR"
  printf 'kafka_2.13 %s\njars %s\nresolved %s\n' "$KAFKA_VERSION" "$n" "$(date -u +%FT%TZ)" >"$LIBS_MARKER"
  rm -rf "$work"
  exec 8>&-
  log "resolved $n jars into $LIBS_DIR in $((SECONDS - t0)) s"
}

# ---------------------------------------------------------------------------------------------
# Config + storage
# ---------------------------------------------------------------------------------------------
write_config() {
  mkdir -p "$KAFKA_DATA_DIR" "$LOG_DIRS"
  cat >"$SERVER_PROPS" <<EOF
# generated by scripts/kafka.sh on every start; edits are overwritten
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$KAFKA_HOST:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://$KAFKA_HOST:$KAFKA_PORT,CONTROLLER://$KAFKA_HOST:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://$KAFKA_HOST:$KAFKA_PORT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$LOG_DIRS
num.partitions=4
default.replication.factor=1
min.insync.replicas=1
auto.create.topics.enable=true
delete.topic.enable=true
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
offsets.topic.num.partitions=8
transaction.state.log.num.partitions=4
share.coordinator.state.topic.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
log.retention.hours=24
log.segment.bytes=67108864
EOF
  cat >"$LOG4J_PROPS" <<'EOF'
status = warn
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = STDOUT
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.controller.name = org.apache.kafka.controller
logger.controller.level = INFO
logger.authorizer.name = kafka.authorizer.logger
logger.authorizer.level = WARN
EOF
}

java_base() {
  # shellcheck disable=SC2206
  JAVA_CMD=(java $KAFKA_HEAP_OPTS -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true
    "-Dlog4j2.configurationFile=$LOG4J_PROPS" -cp "$LIBS_DIR/*")
}

format_storage() {
  [[ -f "$LOG_DIRS/meta.properties" ]] && return 0
  local cid
  # 16 random bytes, base64url without padding (what Uuid.randomUuid produces); avoid a leading
  # '-' so argparse does not take it for an option.
  while :; do
    cid=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
    [[ $cid != -* ]] && break
  done
  log "formatting KRaft storage in $LOG_DIRS (cluster id $cid)"
  java_base
  "${JAVA_CMD[@]}" kafka.tools.StorageTool format --cluster-id "$cid" --config "$SERVER_PROPS" \
    >>"$LOG_FILE" 2>&1 || {
      tail -n 30 "$LOG_FILE" >&2
      rm -rf "$LOG_DIRS"   # never leave a half-formatted dir that the next start would trust
      die "kafka.tools.StorageTool format failed (log: $LOG_FILE)"
    }
}

# ---------------------------------------------------------------------------------------------
# Process / readiness checks
# ---------------------------------------------------------------------------------------------
broker_pid() {   # prints pid if the pid file points at our live broker JVM
  [[ -f "$PID_FILE" ]] || return 1
  local pid
  pid=$(tr -dc '0-9' <"$PID_FILE")
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "kafka.Kafka $SERVER_PROPS" || return 1
  echo "$pid"
}

port_open() { timeout 2 bash -c "exec 3<>/dev/tcp/$KAFKA_HOST/$1" 2>/dev/null; }

node_bin() {
  if [[ -x "$REPO_DIR/node_modules/.bin/node" ]]; then echo "$REPO_DIR/node_modules/.bin/node"
  elif command -v node >/dev/null 2>&1; then command -v node
  else return 1; fi
}

# Real protocol check with a kafkajs admin client: cluster + topic metadata must answer.
# With "warm" (used once at start) it also waits until the group and transaction coordinators
# work: their internal topics are created lazily on first use, and clients that hit them while
# they are still loading see COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR for a while.
metadata_ok() {   # [$1 = check|warm]
  local node mode=${1:-check}
  if ! node=$(node_bin) || [[ ! -d "$REPO_DIR/node_modules/kafkajs" ]]; then
    [[ $mode == warm ]] && log "WARNING: node/kafkajs not found in $REPO_DIR; readiness is only a TCP check"
    port_open "$KAFKA_PORT"; return
  fi
  local rc=0
  CHECK_ERR=$(cd "$REPO_DIR" && KAFKA_CHECK_BROKER="$BOOTSTRAP" KAFKA_CHECK_MODE="$mode" timeout 60 "$node" --no-warnings -e '
    const { Kafka, logLevel } = require("kafkajs");
    const kafka = new Kafka({ clientId: "kafka-sh-check", brokers: [process.env.KAFKA_CHECK_BROKER],
      logLevel: logLevel.NOTHING, connectionTimeout: 3000, requestTimeout: 5000,
      retry: { retries: 0 } });
    const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
    async function retrying(fn) {
      const deadline = Date.now() + 45000;
      for (;;) {
        try { return await fn(); } catch (e) { if (Date.now() > deadline) throw e; await sleep(300); }
      }
    }
    (async () => {
      const admin = kafka.admin();
      await admin.connect();
      const c = await admin.describeCluster();
      if (!c.brokers.length) throw new Error("no brokers in metadata");
      await admin.listTopics();
      if (process.env.KAFKA_CHECK_MODE === "warm") {
        await retrying(() => admin.describeGroups(["kafka-sh-warmup"]));
        await retrying(async () => {
          const p = kafka.producer({ transactionalId: "kafka-sh-warmup", idempotent: true,
            maxInFlightRequests: 1, retry: { retries: 2, initialRetryTime: 100 } });
          await p.connect();
          try { const tx = await p.transaction(); await tx.abort(); } finally { await p.disconnect(); }
        });
      }
      await admin.disconnect();
    })().then(() => process.exit(0), (e) => { console.error(String(e && e.message)); process.exit(1); });
  ' 2>&1 >/dev/null) || rc=$?
  return "$rc"
}

answering() { port_open "$KAFKA_PORT" && metadata_ok; }

wait_ready() {   # $1 = pid
  local pid=$1 deadline=$((SECONDS + KAFKA_START_TIMEOUT))
  while ((SECONDS < deadline)); do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "broker process $pid exited during startup; last lines of $LOG_FILE:"
      tail -n 40 "$LOG_FILE" >&2 || true
      rm -f "$PID_FILE"
      die "Kafka broker failed to start"
    fi
    if port_open "$KAFKA_PORT" && metadata_ok; then
      metadata_ok warm && return 0
      log "broker answers metadata but its group/transaction coordinators did not come up: ${CHECK_ERR:-timed out}"
      tail -n 40 "$LOG_FILE" >&2 || true
      die "Kafka broker on $BOOTSTRAP is not usable (pid $pid still running; 'scripts/kafka.sh stop' to kill it)"
    fi
    sleep 0.5
  done
  log "broker (pid $pid) not answering on $BOOTSTRAP after ${KAFKA_START_TIMEOUT}s; last lines of $LOG_FILE:"
  tail -n 40 "$LOG_FILE" >&2 || true
  die "Kafka broker did not become ready within ${KAFKA_START_TIMEOUT}s (still running as pid $pid; 'scripts/kafka.sh stop' to kill it)"
}

# ---------------------------------------------------------------------------------------------
# Subcommands
# ---------------------------------------------------------------------------------------------
with_lock() { mkdir -p "$KAFKA_DATA_DIR"; exec 9>"$LOCK_FILE"; flock 9; }

do_start() {
  with_lock
  local pid
  if pid=$(broker_pid); then
    if answering; then log "already running (pid $pid) on $BOOTSTRAP"; return 0; fi
    log "broker pid $pid is alive but not answering yet; waiting"
    wait_ready "$pid"; log "ready on $BOOTSTRAP"; return 0
  fi
  rm -f "$PID_FILE"
  if port_open "$KAFKA_PORT" || port_open "$KAFKA_CONTROLLER_PORT"; then
    if metadata_ok; then
      log "WARNING: a Kafka broker not started from $KAFKA_DATA_DIR already answers on $BOOTSTRAP; using it (stop/status do not manage it)"
      return 0
    fi
    die "port $KAFKA_PORT or $KAFKA_CONTROLLER_PORT on $KAFKA_HOST is taken by something that is not a Kafka broker; set KAFKA_PORT/KAFKA_CONTROLLER_PORT"
  fi

  require_tools
  resolve_libs
  write_config
  format_storage

  local t0=$SECONDS
  [[ -f "$LOG_FILE" ]] && mv -f "$LOG_FILE" "$LOG_FILE.1"
  java_base
  log "starting Kafka $KAFKA_VERSION (KRaft) on $BOOTSTRAP, controller $KAFKA_HOST:$KAFKA_CONTROLLER_PORT; log: $LOG_FILE"
  # New session so the broker outlives the caller's process group (npm/vitest/CI teardown);
  # the inner bash writes its own pid and execs java, so the pid file names the JVM itself.
  PIDF="$PID_FILE" setsid bash -c 'echo $$ >"$PIDF"; exec "$@"' kafka-broker \
    "${JAVA_CMD[@]}" kafka.Kafka "$SERVER_PROPS" </dev/null >>"$LOG_FILE" 2>&1 9>&- &
  local i
  for i in $(seq 1 50); do [[ -s "$PID_FILE" ]] && break; sleep 0.1; done
  pid=$(tr -dc '0-9' <"$PID_FILE" 2>/dev/null || true)
  [[ -n $pid ]] || die "broker did not write its pid file $PID_FILE"
  wait_ready "$pid"
  log "ready on $BOOTSTRAP (pid $pid) after $((SECONDS - t0)) s"
}

do_stop() {
  with_lock
  local pid
  if ! pid=$(broker_pid); then
    rm -f "$PID_FILE"
    log "not running"
    return 0
  fi
  log "stopping broker pid $pid"
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + 30))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then
    log "broker did not exit within 30 s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  fi
  rm -f "$PID_FILE"
  log "stopped"
}

do_status() {
  local pid
  if pid=$(broker_pid); then
    if answering; then echo "running (pid $pid) on $BOOTSTRAP, Kafka $KAFKA_VERSION, data $KAFKA_DATA_DIR"; return 0; fi
    echo "process $pid alive but not answering on $BOOTSTRAP"; return 1
  fi
  if port_open "$KAFKA_PORT" && metadata_ok; then
    echo "a Kafka broker answers on $BOOTSTRAP but was not started from $KAFKA_DATA_DIR"; return 0
  fi
  echo "not running"; return 1
}

case "${1:-}" in
  start) do_start ;;
  stop) do_stop ;;
  restart) do_stop; exec 9>&-; do_start ;;
  status) do_status ;;
  ensure) do_start; echo "$BOOTSTRAP" ;;
  *) echo "usage: $0 {start|stop|restart|status|ensure}" >&2; exit 2 ;;
esac
