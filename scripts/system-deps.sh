#!/usr/bin/env bash
# Debian packages the project needs: Graphviz's `dot` (SVG output and its tests),
# Chromium and ChromeDriver (browser tests of the docs site). Never a downloaded browser.
set -euo pipefail
needed=()
command -v dot >/dev/null || needed+=(graphviz)
command -v chromium >/dev/null || needed+=(chromium)
command -v chromedriver >/dev/null || needed+=(chromium-driver)
[ -d /usr/share/fonts/truetype/dejavu ] || needed+=(fonts-dejavu-core)
if [ "${#needed[@]}" -eq 0 ] && [ "${CI:-}" != "true" ]; then
    exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends graphviz chromium chromium-driver fonts-dejavu-core >/dev/null
