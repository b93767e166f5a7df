#!/bin/sh
# Provisioning of one bench node (Debian 12): packages, the shared key for root and vagrant,
# /etc/hosts entries for n1..nN, and a clock that can be moved (chrony installed but stopped
# during clock faults by the bench; the system clock is the one the clock nemesis moves).
set -eu
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq python3 python3-venv python3-pip iptables faketime libfaketime chrony \
  iproute2 procps tar gzip sudo
for home in /root /home/vagrant; do
  install -d -m 700 "$home/.ssh"
  touch "$home/.ssh/authorized_keys"
  grep -qf /tmp/rmq-jepsen.pub "$home/.ssh/authorized_keys" ||
    cat /tmp/rmq-jepsen.pub >> "$home/.ssh/authorized_keys"
  chmod 600 "$home/.ssh/authorized_keys"
done
chown -R vagrant:vagrant /home/vagrant/.ssh
sed -i 's/^#\?PermitRootLogin.*/PermitRootLogin prohibit-password/' /etc/ssh/sshd_config
systemctl reload ssh || systemctl reload sshd || true
# n1..nN by name, as Jepsen expects.
sed -i '/ n[0-9]*$/d' /etc/hosts
printf '%s\n' "$RMQ_JEPSEN_HOSTS" >> /etc/hosts
install -d -m 755 /var/lib/rmq-jepsen /opt/rmq-jepsen
systemctl enable --now chrony
