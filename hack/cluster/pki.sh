#!/usr/bin/env bash
# Certificates and kubeconfigs for the simulated cluster, made with openssl.
# Sourced by up.sh (needs lib.sh first); writes under $PKI_DIR and $RLJOB_CLUSTER_DIR.
#
# One CA signs everything: the apiserver and JobSet webhook serving certs, and one
# client cert per component. Each component authenticates as its own user, so
# RBAC decides what it may do, as on a real cluster:
#   admin                          O=system:masters (the kubeconfig printed for people)
#   system:kube-controller-manager bound by the default RBAC policy
#   system:kube-scheduler          bound by the default RBAC policy
#   jobset-controller              bound to JobSet's own ClusterRole by up.sh
#   kueue-controller               bound to Kueue's own ClusterRole by up.sh (kueue.sh)
#   kwok-controller                O=system:masters: it plays every kubelet, whose
#                                  Node authorizer rights have no RBAC equivalent
#   system:node:<real node>        the real node's kubelet (node.sh), bound to the system:node role
#   kube-apiserver-kubelet-client  O=system:masters: the apiserver towards that kubelet

# new_ca -> ca.crt/ca.key, valid 10 years (the cluster is throwaway, renewal is a restart).
new_ca() {
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=rljob-cluster-ca" \
    -keyout "${PKI_DIR}/ca.key" -out "${PKI_DIR}/ca.crt" 2>/dev/null
}

# new_cert NAME SUBJECT USAGE [SAN] -> NAME.crt/NAME.key signed by the CA.
# USAGE is serverAuth or clientAuth; SAN like "IP:127.0.0.1,DNS:localhost".
new_cert() {
  local name="$1" subj="$2" usage="$3" san="${4:-}"
  local ext="${PKI_DIR}/${name}.ext"
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=${usage}"
    [[ -n "${san}" ]] && echo "subjectAltName=${san}"
  } >"${ext}"
  openssl req -newkey rsa:2048 -nodes -subj "${subj}" \
    -keyout "${PKI_DIR}/${name}.key" -out "${PKI_DIR}/${name}.csr" 2>/dev/null
  openssl x509 -req -in "${PKI_DIR}/${name}.csr" -CA "${PKI_DIR}/ca.crt" -CAkey "${PKI_DIR}/ca.key" \
    -CAcreateserial -days 3650 -extfile "${ext}" -out "${PKI_DIR}/${name}.crt" 2>/dev/null
  rm -f "${PKI_DIR}/${name}.csr" "${ext}"
}

# write_kubeconfig FILE CERT_NAME -> kubeconfig using client cert CERT_NAME.
# Embeds the certificate data so the file can be copied elsewhere and still work.
write_kubeconfig() {
  local file="$1" name="$2"
  cat >"${file}" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: rljob
  cluster:
    server: https://127.0.0.1:${APISERVER_PORT}
    certificate-authority-data: $(base64 -w0 <"${PKI_DIR}/ca.crt")
users:
- name: ${name}
  user:
    client-certificate-data: $(base64 -w0 <"${PKI_DIR}/${name}.crt")
    client-key-data: $(base64 -w0 <"${PKI_DIR}/${name}.key")
contexts:
- name: rljob
  context: {cluster: rljob, user: ${name}, namespace: default}
current-context: rljob
EOF
  chmod 600 "${file}"
}

make_pki() {
  mkdir -p "${PKI_DIR}"
  chmod 700 "${PKI_DIR}"
  new_ca
  # The apiserver is reached as 127.0.0.1 from this machine and, in-cluster, as the
  # first IP of the service range (10.0.0.1) / kubernetes.default.svc.
  new_cert apiserver "/CN=kube-apiserver" serverAuth \
    "IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  new_cert webhook "/CN=jobset-webhook" serverAuth "IP:127.0.0.1,DNS:localhost"
  new_cert admin "/O=system:masters/CN=admin" clientAuth
  new_cert kube-controller-manager "/CN=system:kube-controller-manager" clientAuth
  new_cert kube-scheduler "/CN=system:kube-scheduler" clientAuth
  new_cert jobset-controller "/CN=jobset-controller" clientAuth
  new_cert kueue-controller "/CN=kueue-controller" clientAuth
  new_cert kwok-controller "/O=system:masters/CN=kwok-controller" clientAuth
  # The apiserver's client cert towards the real node's kubelet (logs, exec); the kubelet's own is node.sh's.
  new_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
  # ServiceAccount token signing key pair.
  openssl genrsa -out "${PKI_DIR}/sa.key" 2048 2>/dev/null
  openssl rsa -in "${PKI_DIR}/sa.key" -pubout -out "${PKI_DIR}/sa.pub" 2>/dev/null
  # controller-runtime's webhook server reads tls.crt/tls.key from its certDir.
  mkdir -p "${PKI_DIR}/webhook-certs"
  cp "${PKI_DIR}/webhook.crt" "${PKI_DIR}/webhook-certs/tls.crt"
  cp "${PKI_DIR}/webhook.key" "${PKI_DIR}/webhook-certs/tls.key"

  local n
  for n in kube-controller-manager kube-scheduler jobset-controller kueue-controller kwok-controller; do
    write_kubeconfig "${PKI_DIR}/${n}.kubeconfig" "${n}"
  done
  # The admin kubeconfig is written last, by up.sh, once the cluster is ready: its
  # presence is what `tests/e2e/conftest.py` and people take as "cluster is there".
  write_kubeconfig "${PKI_DIR}/admin.kubeconfig" admin
}
