# rljob developer entry points. Each target is a thin wrapper around a script, so
# CI (.ci/run) and people run the same thing. Add targets for other areas below.

.PHONY: cluster-build cluster-up cluster-down

# Build/install the simulated cluster's binaries into ~/.cache/rljob/bin (cached by version).
cluster-build:
	hack/cluster/build.sh

# Start (or attach to) the simulated GKE TPU cluster; prints the KUBECONFIG to export.
cluster-up:
	hack/cluster/up.sh

# Stop it and delete its state (logs are kept under $${RLJOB_CLUSTER_DIR:-/tmp/rljob-cluster}/logs).
cluster-down:
	hack/cluster/down.sh

.PHONY: venv demo test generate lint images

# Build the operator, trainer and trainer-maxtext images from the Dockerfile (Docker daemon and stand-in base
# images made here when missing; cached by content): localhost/rljob-<target>:dev (options: hack/image.sh).
# IMAGES_ARGS: e.g. IMAGES_ARGS='--save /tmp/rljob-images trainer'.
IMAGES_ARGS ?=
images:
	hack/image.sh $(IMAGES_ARGS)

# Create/refresh .venv with the operator, trainer and dev extras (uv; cached by pyproject hash).
venv:
	hack/venv.sh

# The main job: a tiny packed GRPO run on CPU from examples/tiny-cpu.yaml, metrics on localhost:9464.
# DEMO_LINGER=60 keeps /metrics up that many seconds after the run, to look at the final values.
# DEMO_ARGS: more `rljob train` options, e.g. DEMO_ARGS='--metrics-port 0' beside another running demo.
DEMO_LINGER ?= 0
DEMO_ARGS ?=
demo: venv
	JAX_PLATFORMS=cpu RLJOB_METRICS_LINGER_SECONDS=$(DEMO_LINGER) .venv/bin/rljob train -f examples/tiny-cpu.yaml $(DEMO_ARGS)

# Every test tier (builds and starts the simulated cluster as needed).
test:
	hack/test.sh

# Regenerate everything generated from the RLJob model.
generate: venv
	.venv/bin/rljob crd -o crds -o charts/rljob/crds --docs docs/api.md

lint: venv
	.venv/bin/ruff check . && .venv/bin/ruff format --check .
