#!/usr/bin/env bash
# The test suite, as CI runs it: installs what it needs (Debian, root), then format and lint
# checks, unit and property tests, and the integration tests (which create their own network
# namespaces for the TAP server and remove them).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

need_packages memcached libmemcached-tools iproute2 python3-pymemcache ethtool nftables \
  python3-pylibmc chromium
need_root_for_namespaces

step "cargo fmt --all -- --check"
cargo fmt --all -- --check
step "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
step "cargo test --workspace"
cargo test --workspace
