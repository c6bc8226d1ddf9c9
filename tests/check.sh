# Sourced by the shell tests (cli_contract.sh, gguf_split.sh): named checks that count passes
# and failures, and the summary line whose status ctest reads (check_summary, last).
failures=0
pass=0
check() { # name, then a command that must succeed
  local name=$1; shift
  if "$@"; then pass=$((pass + 1)); echo "ok   $name"; else failures=$((failures + 1)); echo "FAIL $name"; fi
}
fails_with() { # name, expected stderr substring, command...
  local name=$1 want=$2; shift 2
  local err rc=0
  err=$("$@" 2>&1 >/dev/null) || rc=$?
  if [ $rc -ne 0 ] && grep -qF -- "$want" <<<"$err"; then pass=$((pass + 1)); echo "ok   $name"
  else failures=$((failures + 1)); echo "FAIL $name (status $rc, stderr: $err)"; fi
}
json_field() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
check_summary() {
  echo "$pass passed, $failures failed"
  [ $failures -eq 0 ]
}
