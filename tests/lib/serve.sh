# Servers for the shell tests, sourced: cinder serve as a child of the sourcing shell (so `wait`
# has its status), its port from --port-file, SIGTERM expected to end it with status 0.
# Needs $bin (the cinder binary) and $tmp (the test's directory); kills what it started on exit.
pids=()
serve_cleanup() { for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done; }
trap serve_cleanup EXIT

serve_start() { # model, name, then serve flags
  local file=$1 name=$2; shift 2
  "$bin" serve --model "$file" --port 0 --port-file "$tmp/$name.port" "$@" >"$tmp/$name.log" 2>&1 &
  pids+=($!)
  echo $! >"$tmp/$name.pid"
}

serve_port() { # name: waits for /health 200, prints the port
  local name=$1
  for _ in $(seq 600); do
    if [ -s "$tmp/$name.port" ] && curl -sf "http://127.0.0.1:$(cat "$tmp/$name.port")/health" >/dev/null; then
      cat "$tmp/$name.port"; return 0
    fi
    kill -0 "$(cat "$tmp/$name.pid")" 2>/dev/null || { cat "$tmp/$name.log" >&2; return 1; }
    sleep 0.5
  done
  echo "server $name did not become healthy" >&2; cat "$tmp/$name.log" >&2; return 1
}

serve_stop() { # name: SIGTERM, exit status 0 expected
  local pid rc=0
  pid=$(cat "$tmp/$1.pid")
  kill -TERM "$pid"
  wait "$pid" || rc=$?
  if [ $rc -ne 0 ]; then echo "FAIL server $1 exited with status $rc" >&2; cat "$tmp/$1.log" >&2; return 1; fi
  echo "ok   server $1 stopped by SIGTERM with status 0"
}
