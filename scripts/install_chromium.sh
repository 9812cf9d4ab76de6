#!/usr/bin/env bash
# Installs Debian's `chromium` for the episode viewer's browser test (tests/pettingllms/test_viewer_browser.py):
# nothing when it is there already; else `apt-get install --no-install-recommends` (~20 s, ~350 MB), refreshing
# the package lists only when the install alone fails. Needs root (or sudo).
set -euo pipefail
if [ -x /usr/bin/chromium ] || command -v chromium >/dev/null 2>&1; then
  exit 0
fi
as_root=()
if [ "$(id -u)" != 0 ]; then
  as_root=(sudo)
fi
install=("${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium)
started=$SECONDS
echo "install_chromium: apt-get install chromium (for the viewer's browser test) ..."
if ! "${install[@]}" >/dev/null; then
  "${as_root[@]}" apt-get update -q >/dev/null
  "${install[@]}" >/dev/null
fi
echo "install_chromium: $(/usr/bin/chromium --version 2>/dev/null | head -1) in $((SECONDS - started)) s"
