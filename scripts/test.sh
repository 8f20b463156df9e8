#!/usr/bin/env bash
# The test suite, as CI runs it: installs what it needs (Debian, root), then format and lint
# checks, unit and property tests, the integration tests (which create their own network
# namespaces for the TAP server and remove them), the docs check (server/tests/docs.rs: links
# and flags), and a short run of every fuzz target. docs/testing.md says how to run one test.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

need_packages memcached libmemcached-tools iproute2 python3-pymemcache ethtool nftables g++ \
  python3-pylibmc chromium perl nutcracker redis-tools redis-server python3-redis
need_root_for_namespaces

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
