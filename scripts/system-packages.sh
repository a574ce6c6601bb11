#!/usr/bin/env bash
# What flashdesk needs from the operating system, installed with apt-get where it is missing:
#     bash scripts/system-packages.sh build   # cmake and g++ (llama.cpp is compiled), Python's venv
#     bash scripts/system-packages.sh test    # those, plus what the tests drive: chromium and a CJK
#                                             # font (browser tests), Xvfb and Tk (the app's window),
#                                             # an ARM cross-compiler (the CPU patch's NEON check)
# Called by scripts/setup.sh (build) and scripts/test.sh (test); quick when nothing is missing.
# Runs apt-get as root, or through sudo when it needs no password; otherwise it prints the one
# command to run and stops. Debian 12 and Ubuntu 22.04+; on Ubuntu, where apt's chromium is only a
# snap launcher, the browser tests use Playwright's own chromium (scripts/test.sh fetches it).
set -euo pipefail
PYTHON=${PYTHON:-python3}
what=${1:-build}

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v g++ >/dev/null || need+=(g++)
"$PYTHON" -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
if [ "$what" = test ]; then
  ubuntu=$(. /etc/os-release 2>/dev/null && [ "${ID:-}" = ubuntu ] && echo 1 || true)
  [ -n "$ubuntu" ] || command -v chromium >/dev/null || need+=(chromium)
  command -v fc-list >/dev/null || need+=(fontconfig)
  fc-list 2>/dev/null | grep -qi "wqy\|noto.*cjk" || need+=(fonts-wqy-zenhei)  # readable zh-TW screenshots
  command -v Xvfb >/dev/null || need+=(xvfb)
  "$PYTHON" -c 'import tkinter' 2>/dev/null || need+=(python3-tk)
  command -v aarch64-linux-gnu-g++ >/dev/null || need+=(g++-aarch64-linux-gnu)  # the CPU patch's ARM compile check
fi
[ ${#need[@]} -eq 0 ] && exit 0

line="apt-get install -y ${need[*]}"
if ! command -v apt-get >/dev/null; then
  echo "flashdesk needs: ${need[*]} (this system has no apt-get: install them with its package manager)" >&2
  exit 1
fi
if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  sudo=(sudo)
else
  echo "flashdesk needs these system packages: ${need[*]}. Run:  sudo apt-get update && sudo $line" >&2
  exit 1
fi
echo "Installing system packages: ${need[*]} ..."
export DEBIAN_FRONTEND=noninteractive
${sudo[@]+"${sudo[@]}"} apt-get update -q
${sudo[@]+"${sudo[@]}"} apt-get install -y -q "${need[@]}"
if [[ " ${need[*]} " == *" python3-tk "* ]] && ! "$PYTHON" -c 'import tkinter' 2>/dev/null; then
  # python3-tk serves the system's Python; a Python built elsewhere (pyenv, conda) needs its own Tk
  echo "note: $PYTHON still has no tkinter (it is not the system's Python): the app-window tests will fail" >&2
fi
