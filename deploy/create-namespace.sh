#!/bin/sh
# One-shot job of docker-compose.yml, run in temporalio/admin-tools: waits until the server at
# TEMPORAL_ADDRESS serves, creates TEMPORAL_NAMESPACE when missing and registers each name in
# SEARCH_ATTRIBUTES on it (`Name` is a Keyword search attribute, `Name:Type` one of that type, such
# as `CoordAgents:KeywordList`). Safe to run again.
# Servers cache namespace metadata for a few seconds, so after registering new attributes the job
# waits SETTLE_SECONDS before it exits and the workers (which depend on it) start.
set -eu

ADDRESS=${TEMPORAL_ADDRESS:-temporal:7233}
NAMESPACE=${TEMPORAL_NAMESPACE:-default}
ATTEMPTS=${SETUP_ATTEMPTS:-60}
DELAY=${SETUP_DELAY_SECONDS:-2}
SETTLE=${SETTLE_SECONDS:-10}
created=""
: "${SEARCH_ATTRIBUTES:?space-separated search attribute names}"

# retry <what> <command...>: run the command until it succeeds, at most ATTEMPTS times.
retry() {
  what=$1
  shift
  attempt=1
  until "$@"; do
    if [ "$attempt" -ge "$ATTEMPTS" ]; then
      echo "gave up waiting for $what after $ATTEMPTS attempts" >&2
      return 1
    fi
    echo "waiting for $what (attempt $attempt/$ATTEMPTS)"
    attempt=$((attempt + 1))
    sleep "$DELAY"
  done
}

serving() {
  temporal operator cluster health --address "$ADDRESS" >/dev/null 2>&1
}

ensure_namespace() {
  temporal operator namespace describe --address "$ADDRESS" -n "$NAMESPACE" >/dev/null 2>&1 ||
    temporal operator namespace create --address "$ADDRESS" -n "$NAMESPACE"
}

# ensure_search_attribute <name> <type>: create it, tolerating "already exists".
ensure_search_attribute() {
  if temporal operator search-attribute list --address "$ADDRESS" -n "$NAMESPACE" 2>/dev/null |
    grep -qw "$1"; then
    return 0
  fi
  if out=$(temporal operator search-attribute create --address "$ADDRESS" -n "$NAMESPACE" \
    --name "$1" --type "$2" 2>&1); then
    echo "registered search attribute $1 ($2)"
    created="$created $1"
    return 0
  fi
  case $out in
    *"already exists"*) return 0 ;;
  esac
  echo "$out" >&2
  return 1
}

retry "Temporal at $ADDRESS" serving
retry "namespace $NAMESPACE" ensure_namespace
for entry in $SEARCH_ATTRIBUTES; do
  name=${entry%%:*}
  type=Keyword
  case $entry in *:*) type=${entry#*:} ;; esac
  retry "search attribute $name" ensure_search_attribute "$name" "$type"
done
if [ -n "$created" ]; then
  echo "letting the server pick up the new search attributes ($SETTLE s)"
  sleep "$SETTLE"
fi
echo "namespace $NAMESPACE ready; search attributes: $SEARCH_ATTRIBUTES"
