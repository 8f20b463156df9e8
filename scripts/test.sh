#!/usr/bin/env bash
# The test suite, as CI runs it: installs what it needs (Debian, root), then format and lint
# checks, unit and property tests, the integration tests (which create their own network
# namespaces for the TAP server and remove them), the docs check (server/tests/docs.rs: links
# and flags), and a short run of every fuzz target. docs/testing.md says how to run one test.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

need_packages memcached libmemcached-tools iproute2 python3-pymemcache ethtool nftables g++ \
  python3-pylibmc chromium perl nutcracker redis-tools redis-server python3-redis python3-venv \
  nodejs
need_root_for_namespaces

# The client libraries server/tests/resp_clients.rs runs, at the versions pinned in
# server/tests/clients/, under target/clients; installed again only when a pin changes.
clients=target/clients pins=server/tests/clients
if ! cmp -s "$pins/requirements.txt" "$clients/venv/.pinned"; then
  step "pip install -r $pins/requirements.txt (into $clients/venv)"
  rm -rf "$clients/venv"
  /usr/bin/python3 -m venv "$clients/venv"
  "$clients/venv/bin/pip" install -q -r "$pins/requirements.txt"
  cp "$pins/requirements.txt" "$clients/venv/.pinned"
fi
if ! cmp -s "$pins/package-lock.json" "$clients/node/.pinned"; then
  step "npm ci (into $clients/node)"
  mkdir -p "$clients/node"
  cp "$pins/package.json" "$pins/package-lock.json" "$clients/node/"
  (cd "$clients/node" && npm ci --no-audit --no-fund --loglevel=error)
  cp "$pins/package-lock.json" "$clients/node/.pinned"
fi

step "cargo fmt --all -- --check"
cargo fmt --all -- --check
step "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
step "cargo test --workspace"
cargo test --workspace
step "cargo clippy -p fuzz --features libfuzzer --all-targets -- -D warnings"
cargo clippy -p fuzz --features libfuzzer --all-targets -- -D warnings
# A short coverage-guided run of every fuzz target (scripts/fuzz.sh for long ones).
bash scripts/fuzz.sh all 12
