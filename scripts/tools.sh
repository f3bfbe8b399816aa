# Shared by scripts/serve and scripts/test (sourced, not run): tool versions, PATH, and
# "install it if missing" steps. Each step prints one line saying what it does or skips.
#
# Tools land where their installers put them: rustup's target in the toolchain, trunk and
# wasm-bindgen-cli in ~/.cargo/bin (cargo install), wasm-opt (npm binaryen) in
# $VRAMFIT_TOOLS_DIR (default ~/.cache/vramfit-tools), Debian packages via apt.

VRAMFIT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TRUNK_VERSION=0.21.14
BINARYEN_VERSION=132 # also pinned in Trunk.toml ([tools] wasm_opt)
# wasm-bindgen-cli must equal the wasm-bindgen crate the page links (pinned with `=` in
# Cargo.toml), or Trunk tries to download one; read it from the lockfile.
WASM_BINDGEN_VERSION="$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' "$VRAMFIT_ROOT/Cargo.lock")"
VRAMFIT_TOOLS_DIR="${VRAMFIT_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/vramfit-tools}"
BINARYEN_DIR="$VRAMFIT_TOOLS_DIR/binaryen-$BINARYEN_VERSION"

# Our wasm-opt first: Debian's binaryen (108) produces wasm that crashes at load.
export PATH="$BINARYEN_DIR/node_modules/.bin:${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
# Readable errors from cargo and Trunk (this environment may set RUST_BACKTRACE=1).
export RUST_BACKTRACE=0

say() { printf -- '--- %s\n' "$*"; }

die() {
  printf 'error: %s\n' "$*" >&2
  exit 1
}

# Runs a command as root: directly if we are root, else through sudo.
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

APT_UPDATED=0
# Installs Debian packages that are missing (apt-get update at most once per run).
apt_install() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    say "apt packages present: $*"
    return 0
  fi
  command -v apt-get >/dev/null || die "need ${missing[*]} and there is no apt-get; install them by hand"
  if [ "$APT_UPDATED" -eq 0 ]; then
    say "apt-get update"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    APT_UPDATED=1
  fi
  say "apt-get install ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

ensure_rust() {
  command -v cargo >/dev/null && command -v rustup >/dev/null ||
    die "cargo and rustup are needed: https://rustup.rs"
  if command -v cc >/dev/null; then
    say "C compiler present ($(command -v cc))"
  else
    apt_install build-essential
  fi
  if rustup target list --installed | grep -qx wasm32-unknown-unknown; then
    say "wasm32-unknown-unknown target present"
  else
    say "rustup target add wasm32-unknown-unknown"
    rustup target add wasm32-unknown-unknown
  fi
}

ensure_trunk() {
  if [ "$(trunk --version 2>/dev/null)" = "trunk $TRUNK_VERSION" ]; then
    say "trunk $TRUNK_VERSION present"
  else
    say "cargo install --locked trunk --version $TRUNK_VERSION (about 15 minutes on 2 cores)"
    cargo install --locked trunk --version "$TRUNK_VERSION"
  fi
}

ensure_wasm_bindgen() {
  [ -n "$WASM_BINDGEN_VERSION" ] || die "no wasm-bindgen in Cargo.lock"
  if [ "$(wasm-bindgen --version 2>/dev/null)" = "wasm-bindgen $WASM_BINDGEN_VERSION" ] &&
    command -v wasm-bindgen-test-runner >/dev/null; then
    say "wasm-bindgen-cli $WASM_BINDGEN_VERSION present"
  else
    # Not --locked: its lockfile wants a webpki-roots release the registry no longer has.
    say "cargo install wasm-bindgen-cli --version $WASM_BINDGEN_VERSION (about 5 minutes)"
    cargo install --force wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION"
  fi
}

ensure_wasm_opt() {
  if "$BINARYEN_DIR/node_modules/.bin/wasm-opt" --version 2>/dev/null | grep -q "version $BINARYEN_VERSION\b"; then
    say "wasm-opt $BINARYEN_VERSION present ($BINARYEN_DIR)"
  else
    command -v npm >/dev/null || die "npm (Node 20) is needed to install wasm-opt (binaryen@$BINARYEN_VERSION)"
    say "npm install binaryen@$BINARYEN_VERSION into $BINARYEN_DIR (for wasm-opt)"
    mkdir -p "$BINARYEN_DIR"
    npm install --prefix "$BINARYEN_DIR" --no-audit --no-fund --loglevel=error "binaryen@$BINARYEN_VERSION"
  fi
}

# Downloads the crates the build needs, so later steps (Trunk's --offline) work offline.
ensure_crates() {
  if (cd "$VRAMFIT_ROOT" && cargo fetch --offline >/dev/null 2>&1); then
    say "crates present (cargo fetch --offline)"
  else
    say "cargo fetch"
    (cd "$VRAMFIT_ROOT" && cargo fetch)
  fi
}

# Everything the page's build needs.
ensure_web_tools() {
  ensure_rust
  ensure_trunk
  ensure_wasm_bindgen
  ensure_wasm_opt
  ensure_crates
}

# The page's end-to-end test and benchmark (tests/e2e): playwright-core from npm, pinned in its
# package-lock.json; it drives Debian's chromium and downloads no browser.
ensure_e2e_deps() {
  command -v node >/dev/null || die "node (20 or newer) is needed for the page's end-to-end test"
  if (cd "$VRAMFIT_ROOT/tests/e2e" && npm ls --silent playwright-core >/dev/null 2>&1); then
    say "tests/e2e npm packages present"
  else
    say "npm ci in tests/e2e (playwright-core, no browser download)"
    (cd "$VRAMFIT_ROOT/tests/e2e" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error)
  fi
}
