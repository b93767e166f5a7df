#!/usr/bin/env bash
# Test certificates for TLS (docs/security.md): a CA, a server certificate for 127.0.0.1 and
# localhost, a client certificate, and a second, unrelated CA (for "wrong CA" tests).
# Usage: scripts/gen_test_certs.sh DIR   (keys are written there; never commit them)
set -euo pipefail
dir=${1:?usage: gen_test_certs.sh DIR}
mkdir -p "$dir"
cd "$dir"
days=30
q() { openssl "$@" 2>/dev/null; }

ca() { # name
  q req -x509 -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.pem" -days $days \
    -subj "/CN=rmq_ha test $1" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign"
}
leaf() { # name ca extfile-lines
  local name=$1 ca=$2 ext=$3
  q req -newkey rsa:2048 -nodes -keyout "$name.key" -out "$name.csr" -subj "/CN=rmq_ha $name"
  printf '%b' "$ext" > "$name.ext"
  q x509 -req -in "$name.csr" -CA "$ca.pem" -CAkey "$ca.key" -CAcreateserial \
    -out "$name.pem" -days $days -extfile "$name.ext"
  rm -f "$name.csr" "$name.ext"
}

ca ca
ca other-ca
leaf server ca "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
leaf client ca "extendedKeyUsage=clientAuth\n"
leaf stranger other-ca "extendedKeyUsage=clientAuth\n"
chmod 600 ./*.key
echo "test certificates in $dir: ca.pem server.pem/key client.pem/key other-ca.pem stranger.pem/key"
