#!/usr/bin/env bash
# Installs the Debian `prometheus` package for the exporter's end-to-end test, once.
# Idempotent: does nothing when a `prometheus` binary is already on PATH. The package's
# own service is never left running (the test starts its own server on loopback).
set -euo pipefail

if command -v prometheus >/dev/null 2>&1; then
    echo "prometheus already installed: $(command -v prometheus)"
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
elif command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
else
    echo "install-prometheus: need root or sudo to install the Debian package" >&2
    exit 1
fi

# policy-rc.d exit 101 tells invoke-rc.d not to start services during the install.
POLICY=/usr/sbin/policy-rc.d
ADDED_POLICY=0
if [ ! -e "$POLICY" ]; then
    printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$POLICY" >/dev/null
    "${SUDO[@]}" chmod 755 "$POLICY"
    ADDED_POLICY=1
fi
cleanup() {
    if [ "$ADDED_POLICY" -eq 1 ]; then "${SUDO[@]}" rm -f "$POLICY"; fi
}
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update
"${SUDO[@]}" apt-get install -y --no-install-recommends prometheus

# Belt and braces: if an init system started the packaged service anyway, stop and disable
# it so nothing keeps listening on the package's default (all-interfaces) address.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    "${SUDO[@]}" systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
if [ -x /etc/init.d/prometheus ]; then
    "${SUDO[@]}" /etc/init.d/prometheus stop >/dev/null 2>&1 || true
    if command -v update-rc.d >/dev/null 2>&1; then
        "${SUDO[@]}" update-rc.d prometheus disable >/dev/null 2>&1 || true
    fi
fi

command -v prometheus
prometheus --version 2>&1 | head -n 1
