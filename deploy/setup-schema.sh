#!/bin/sh
# One-shot job of docker-compose.yml, run in temporalio/admin-tools: creates Temporal's main and
# visibility databases when missing and brings both schemas up to the version this admin-tools
# image ships. Every step is idempotent, so `docker compose up` can run it again at any time.
# temporal-sql-tool reads its connection from SQL_PLUGIN, SQL_HOST, SQL_PORT, SQL_USER and
# SQL_PASSWORD, which the compose service sets.
set -eu

SCHEMA_ROOT=/etc/temporal/schema/postgresql/v12

# setup <database> <schema: temporal|visibility>
setup() {
  db=$1
  if ! out=$(temporal-sql-tool --db "$db" create-database 2>&1); then
    case $out in
      *"already exists"*) echo "database $db already exists" ;;
      *) echo "$out" >&2; return 1 ;;
    esac
  fi
  temporal-sql-tool --db "$db" setup-schema -v 0.0
  temporal-sql-tool --db "$db" update-schema -d "$SCHEMA_ROOT/$2/versioned"
}

setup "${DBNAME:-temporal}" temporal
setup "${VISIBILITY_DBNAME:-temporal_visibility}" visibility
echo "schema setup complete"
