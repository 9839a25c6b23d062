#!/usr/bin/env bash
# Print the JobSet webhook configurations, registered by URL (no Service: the
# controller runs as a local process), with our CA as the caBundle.
# Usage: hack/cluster/webhooks.sh https://127.0.0.1:19443 ca.crt | kubectl apply -f -
#
# Same webhooks, paths, rules and objectSelectors as JobSet v0.12.0's
# config/components/webhook (manifests.yaml + patches). The pod webhooks matter:
# they implement exclusive placement (alpha.jobset.sigs.k8s.io/exclusive-topology).
set -euo pipefail

URL="$1"
CA_BUNDLE="$(base64 -w0 <"$2")"

# hook NAME PATH RESOURCE OPERATIONS [pod-selector] -> one webhook entry.
hook() {
  local name="$1" path="$2" resource="$3" ops="$4" group version
  if [[ "${resource}" == pods ]]; then group='""' version=v1; else group=jobset.x-k8s.io version=v1alpha2; fi
  cat <<YAML
- name: ${name}
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  clientConfig:
    url: ${URL}${path}
    caBundle: ${CA_BUNDLE}
  rules:
  - apiGroups: [${group}]
    apiVersions: [${version}]
    operations: [${ops}]
    resources: [${resource}]
YAML
  # Pod webhooks only look at JobSet pods, so a stopped controller cannot block other pods.
  if [[ "${resource}" == pods ]]; then
    cat <<YAML
  objectSelector:
    matchExpressions:
    - {key: jobset.sigs.k8s.io/jobset-name, operator: Exists}
YAML
  fi
}

cat <<YAML
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: jobset-mutating-webhook-configuration
webhooks:
$(hook mjobset.kb.io /mutate-jobset-x-k8s-io-v1alpha2-jobset jobsets CREATE)
$(hook mpod.kb.io /mutate--v1-pod pods CREATE)
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: jobset-validating-webhook-configuration
webhooks:
$(hook vjobset.kb.io /validate-jobset-x-k8s-io-v1alpha2-jobset jobsets "CREATE, UPDATE")
$(hook vpod.kb.io /validate--v1-pod pods CREATE)
YAML
