#!/bin/sh
# Runs once inside the Mac-shaped node's image at build time (Containerfile's RUN), as root,
# with the build arguments of lab/macos/node.py in the environment. Each step makes the
# Debian node look like macOS 15 where the product touches the OS; docs/lab.md, "The
# Mac-shaped node", gives the macOS source of each.
set -eu
files=/tmp/mac-files

# zsh, the login shell of every macOS account since 10.15
# (https://support.apple.com/en-us/102360).
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends zsh >/dev/null
apt-get clean

# Accounts as on a Mac: gid 0 is wheel and there is no group root; staff is gid 20 (Debian's
# dialout, which has it, goes: macOS has no such group); the first user is uid 501 in staff,
# home under /Users, shell /bin/zsh, and no sudo rule. Debian's admin user is not there.
userdel --remove admin
groupmod --new-name wheel root
groupdel dialout
old_staff="$(getent group staff | cut -d: -f3)"
groupmod --gid "$MAC_GID" staff
find / -xdev -gid "$old_staff" -exec chgrp -h "$MAC_GID" {} +
# systemd-sysusers (at boot, and from packages) would make them again from Debian's list:
# the local copy of that list names the macOS ones (sysusers.d(5): /etc overrides /usr/lib).
mkdir -p /etc/sysusers.d
sed -e '/^g dialout /d' -e "s/^g staff .*/g staff      $MAC_GID    -/" \
  -e 's/^u root       0 /u root       0:0 /' /usr/lib/sysusers.d/basic.conf \
  >/etc/sysusers.d/basic.conf
systemd-sysusers
getent group root >/dev/null && { echo "finish-mac.sh: a group root is left" >&2; exit 1; }
mkdir -p "$(dirname "$MAC_HOME")"
useradd --uid "$MAC_UID" --gid "$MAC_GROUP" --home-dir "$MAC_HOME" --create-home \
  --shell /bin/zsh "$MAC_USER"

# sshd gives a command macOS's default path (`sysctl user.cs_path`, the PATH a command run
# over SSH gets there: https://apple.stackexchange.com/questions/479428), and zsh run for that
# command reads no profile: macOS has no /etc/zshenv, and /etc/zprofile (path_helper) and
# ~/.zprofile (Homebrew's shellenv) are read by login shells only
# (https://zsh.sourceforge.io/Doc/Release/Files.html#Startup_002fShutdown-Files).
cat >/etc/ssh/sshd_config.d/lab-macos.conf <<EOF
# Lab: the PATH of a command run over SSH on macOS.
SetEnv PATH=$MAC_STD_PATH
EOF
: >/etc/zsh/zshenv
# Homebrew's installer tells the user to add this to ~/.zprofile ("Next steps").
printf 'eval "$(/opt/homebrew/bin/brew shellenv)"\n' >"$MAC_HOME/.zprofile"
chown "$MAC_USER:$MAC_GROUP" "$MAC_HOME/.zprofile"

# macOS's identity: SystemVersion.plist (sw_vers, platform.mac_ver()) and sw_vers itself.
mkdir -p /System/Library/CoreServices
install -m 0644 "$files/SystemVersion.plist" /System/Library/CoreServices/SystemVersion.plist
install -m 0755 "$files/sw_vers.py" /usr/bin/sw_vers

# The Command Line Tools' Python 3.9 is /usr/bin/python3; Debian's python3 stays as
# /usr/bin/python3.11 for the lab's own programs (launchd's and Ollama's stand-ins, the BSD
# tools), which name it directly.
install -m 0644 "$files/sitecustomize.py" "$CLT_PYTHON/lib/python3.9/site-packages/sitecustomize.py"
mkdir -p "$CLT/usr/bin"
ln -s "$CLT_PYTHON/bin/python3" "$CLT/usr/bin/python3"
dpkg-divert --quiet --local --rename --divert /usr/bin/python3.debian --add /usr/bin/python3
ln -s "$CLT/usr/bin/python3" /usr/bin/python3
"$CLT_PYTHON/bin/python3.9" -c 'import platform, sys; assert sys.version_info[:2] == (3, 9) and platform.system() == "Darwin"'

# BSD userland where the product calls it; the GNU tools leave PATH (kept for the lab).
mkdir -p /usr/libexec/lab-gnu
for tool in /usr/bin/pgrep /usr/bin/pkill /bin/ps /sbin/init; do
  dpkg-divert --quiet --local --rename --divert "/usr/libexec/lab-gnu/$(basename "$tool")" \
    --add "$tool"
done
# (No /sbin/init on a Mac: Ansible's service_mgr fact would read that link's target.)
install -m 0755 "$files/bsdproc.py" /usr/bin/pgrep
ln -s pgrep /usr/bin/pkill
ln -s /usr/bin/pgrep /bin/ps
install -m 0755 "$files/lsof.py" /usr/sbin/lsof
install -m 0755 "$files/plutil.py" /usr/bin/plutil

# launchd's stand-in: the client as /bin/launchctl, its state directory owned by the user,
# and the unit that is "the user is logged in at the console" (automatic login).
ln -s /opt/lab-macos/launchctl /bin/launchctl
install -d -o "$MAC_USER" -g "$MAC_GROUP" -m 0755 "$LAUNCHD_STATE_DIR"
install -d -o "$MAC_USER" -g "$MAC_GROUP" -m 0700 "$MAC_HOME/Library" \
  "$MAC_HOME/Library/LaunchAgents" "$MAC_HOME/Library/Logs"
cat >"/etc/systemd/system/$SESSION_UNIT" <<EOF
# Lab: $MAC_USER logged in at the console. While this runs, launchd's gui/$MAC_UID domain
# exists; stopping it is a logout (launchd stops the domain's jobs, then exits).
[Unit]
Description=Lab stand-in for the console session of $MAC_USER (launchd gui/$MAC_UID)
After=network.target ssh.service

[Service]
User=$MAC_USER
Group=$MAC_GROUP
RuntimeDirectory=$(basename "$(dirname "$LAUNCHD_SOCKET")")
ExecStart=/usr/bin/python3.11 /opt/lab-macos/launchd.py --socket $LAUNCHD_SOCKET --state-dir $LAUNCHD_STATE_DIR --home $MAC_HOME --localnet-shim /opt/lab-macos/localnet_deny.so
# SIGTERM to launchd alone: it stops its jobs as a logout does (each its ExitTimeOut).
KillMode=mixed
TimeoutStopSec=120

[Install]
WantedBy=multi-user.target
EOF
systemctl enable "$SESSION_UNIT" >/dev/null 2>&1

# Homebrew's prefix, owned by the user who installed it, nothing poured yet: a fresh Mac
# has neither python@3.12 nor ollama (the bottles wait in /opt/lab-macos/bottles).
install -m 0755 -D "$files/brew.py" /opt/homebrew/bin/brew
mkdir -p /opt/homebrew/Cellar /opt/homebrew/opt /opt/homebrew/sbin
chown -R "$MAC_USER:$MAC_GROUP" /opt/homebrew
mkdir -p /Applications

# The lab's own programs are on Debian's Python; check them now rather than at first use.
/usr/bin/python3.11 -c 'import sys; sys.path.insert(0, "/opt/lab-macos"); import launchd'

# Where the ollama launcher finds lab/inference.py's kit, mounted by lab/lab.py (the Mac's
# Ollama runs the registry's models for real, on every CPU the node has: the M1's GPU).
printf '%s\n' "$INFERENCE_MOUNT" >/opt/lab-macos/inference-mount
