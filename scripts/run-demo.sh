#!/usr/bin/env bash
# `make run`: the demo on SQLite — migrate, demo data, then web + django-q2 cluster + one
# demo worker per insight. Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBUG="${DEBUG:-true}"
export POP_CALLBACK_ALLOW_PRIVATE="${POP_CALLBACK_ALLOW_PRIVATE:-true}"
PORT="${PORT:-8000}"
PY=.venv/bin/python
mkdir -p run
# One /metrics for the node: web workers and the cluster write their counters here.
if [ -z "${PROMETHEUS_MULTIPROC_DIR:-}" ]; then
    export PROMETHEUS_MULTIPROC_DIR="$PWD/run/metrics"
    rm -rf "$PROMETHEUS_MULTIPROC_DIR"
fi
mkdir -p "$PROMETHEUS_MULTIPROC_DIR"

$PY manage.py migrate --noinput
$PY manage.py pop_schedules
# A 10 s clip for the transcode-and-package template, when this machine has ffmpeg.
SAMPLE=run/media/sample.mp4
if command -v ffmpeg >/dev/null && [ ! -f "$SAMPLE" ]; then
    mkdir -p run/media
    ffmpeg -hide_banner -loglevel error -y \
        -f lavfi -i testsrc=duration=10:size=640x360:rate=25 \
        -f lavfi -i sine=frequency=440:duration=10 \
        -c:v libx264 -pix_fmt yuv420p -c:a aac -shortest "$SAMPLE" || true
fi
$PY manage.py pop_demo --token-file run/demo-worker.token --sample-media "$SAMPLE"

pids=()
stopping=""
cleanup() {
    trap - INT TERM EXIT
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap 'stopping=yes; echo; echo "Stopping POP…"; cleanup; exit 0' INT TERM
trap cleanup EXIT
# Logs are appended to, one marked section per start: a restart keeps the earlier run's.
for log in web qcluster worker-mediainfo worker-transcode; do
    echo "=== make run started $(date -u +%Y-%m-%dT%H:%M:%SZ) ===" >>"run/$log.log"
done

.venv/bin/gunicorn popsite.wsgi:application --bind "127.0.0.1:${PORT}" \
    --workers 2 --threads 8 --access-logfile - >>run/web.log 2>&1 &
pids+=($!)
$PY manage.py qcluster >>run/qcluster.log 2>&1 &
pids+=($!)

URL="http://127.0.0.1:${PORT}"
for _ in $(seq 1 50); do
    curl -fs "$URL/healthz" >/dev/null 2>&1 && break
    sleep 0.2
done
# The worker reads its token from the file: a token in argv would show in `ps`.
# Four agendas at once each: the demo's long sleeps must not hold up everything else.
for insight in mediainfo transcode; do
    .venv/bin/pop worker --url "$URL" --token-file run/demo-worker.token --insight "$insight" \
        --name "demo-$insight" --concurrency 4 >>"run/worker-$insight.log" 2>&1 &
    pids+=($!)
done

cat <<MSG

POP is running at $URL/
  dashboard: $URL/            admin: $URL/admin/
  API docs:  $URL/api/v1/docs/
  logins:    operator (staff), acme, globex, initech — password: pop-demo-password
  logs:      run/web.log run/qcluster.log run/worker-*.log
Press Ctrl-C to stop.
MSG
wait -n "${pids[@]}" || true
if [ -z "$stopping" ]; then
    echo "A POP process ended on its own; stopping the others (see run/*.log)." >&2
    exit 1
fi
