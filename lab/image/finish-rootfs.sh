#!/bin/sh
# Runs inside the node image's root filesystem, once, at build time: the Containerfile's RUN
# step, or chroot after debootstrap (build.sh). What a lab node needs beyond its packages.
set -eu

# systemd as PID 1 in a container: a fresh machine id per container, and no units that make
# no sense there (they only slow the boot or fail).
: >/etc/machine-id
for unit in systemd-remount-fs.service getty@tty1.service console-getty.service \
  systemd-udevd.service systemd-udev-trigger.service sys-kernel-debug.mount \
  systemd-firstboot.service; do
  ln -sf /dev/null "/etc/systemd/system/$unit"
done

# sshd, reached as on a real host. Each container makes its own host keys at first boot
# (keys baked into the image would be shared by every node).
rm -f /etc/ssh/ssh_host_*
mkdir -p /etc/systemd/system/ssh.service.d
cat >/etc/systemd/system/ssh.service.d/lab-host-keys.conf <<'UNIT'
[Service]
ExecStartPre=
ExecStartPre=/usr/bin/ssh-keygen -A
ExecStartPre=/usr/sbin/sshd -t
UNIT

# The login user Ansible uses, as on Debian after install: in group sudo, whose rule asks for
# the user's password. Its password and authorized key are set per lab by lab/lab.py.
useradd --create-home --shell /bin/bash --groups sudo admin
