# rljob images, three targets from one file:
#   docker build --target operator -t rljob-operator .                  the kopf operator (no JAX)
#   docker build --target trainer  -t rljob-trainer .                   JAX on TPU + Tunix (Python 3.11)
#   docker build --target trainer --build-arg WITH_VLLM=1 ...            + the vLLM TPU rollout backend
#   docker build --target trainer-maxtext -t rljob-trainer-maxtext .    spec.model.backend: maxtext
#                                                                        (Python 3.12, docs/maxtext.md)
# Every Python install step is hack/install.sh, which hack/check_dockerfile.sh runs in a fresh venv
# (CI has no Docker engine), so what is checked is what the image runs.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
# MaxText requires Python >= 3.12 and cannot share an environment with the Tunix trainer (docs/maxtext.md).
ARG MAXTEXT_PYTHON_IMAGE=python:3.12-slim-bookworm

# --- base: interpreter, tini, a venv and the non-root user; no rljob code yet ---------------------
FROM ${PYTHON_IMAGE} AS base
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/rljob \
    PATH=/opt/rljob/bin:$PATH \
    PYTHON=/opt/rljob/bin/python
# tini is PID 1: it forwards SIGTERM (GKE preemption, pod deletion) to Python and reaps the children of
# vLLM and multiprocessing. Python itself as PID 1 would ignore SIGTERM unless it installed a handler.
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini=0.19.0-1+b3 \
    && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/rljob \
    && groupadd --gid 10001 rljob \
    && useradd --uid 10001 --gid 10001 --home-dir /home/rljob --create-home --shell /usr/sbin/nologin rljob
WORKDIR /src
# Only what the dependency step reads: a source edit does not invalidate the dependency layers below.
COPY pyproject.toml ./
COPY hack/install.sh hack/install.sh
COPY hack/maxtext-constraints.txt hack/maxtext-constraints.txt

# --- dependencies of each image -------------------------------------------------------------------
FROM base AS operator-deps
RUN hack/install.sh deps operator

FROM base AS trainer-deps
# tpu: jax[tpu] (libtpu is a wheel); cpu: plain jax, e.g. to try the image on a laptop.
ARG JAX_VARIANT=tpu
# 1: add the vLLM TPU backend (vllm-tpu + tpu-inference) for spec.rollout.engine: vllm.
ARG WITH_VLLM=0
RUN JAX_VARIANT="${JAX_VARIANT}" WITH_VLLM="${WITH_VLLM}" hack/install.sh deps trainer

# --- trainer image ---------------------------------------------------------------------------------
FROM trainer-deps AS trainer
COPY README.md ./
COPY rljob/ rljob/
COPY operator/ operator/
COPY trainer/ trainer/
COPY cli/ cli/
RUN hack/install.sh project \
    && rm -rf /src \
    && mkdir -p /home/rljob/.cache/jax \
    && chown -R 10001:10001 /home/rljob
# A writable HOME, and JAX's persistent compilation cache in it (mount a volume there to keep compiled
# programs across restarts of the same job).
ENV HOME=/home/rljob \
    JAX_COMPILATION_CACHE_DIR=/home/rljob/.cache/jax
WORKDIR /home/rljob
# The examples' local files (the tiny demo's tokenizer and dataset): relative paths in an RLJob resolve here.
COPY --chown=10001:10001 examples/ examples/
USER 10001:10001
# Exec form: tini, then Python, with no shell in between to swallow SIGTERM.
ENTRYPOINT ["tini", "--", "python", "-m", "rljob_trainer"]
CMD ["--config", "/etc/rljob/rljob.yaml"]

# --- MaxText trainer image: the same base steps on Python 3.12 (tests/chart/test_dockerfile.py keeps the two
# base stages identical), the maxtext extra pinned by hack/maxtext-constraints.txt, the trainer's layout ---
FROM ${MAXTEXT_PYTHON_IMAGE} AS maxtext-base
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/rljob \
    PATH=/opt/rljob/bin:$PATH \
    PYTHON=/opt/rljob/bin/python
# tini is PID 1: it forwards SIGTERM (GKE preemption, pod deletion) to Python and reaps the children of
# vLLM and multiprocessing. Python itself as PID 1 would ignore SIGTERM unless it installed a handler.
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini=0.19.0-1+b3 \
    && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/rljob \
    && groupadd --gid 10001 rljob \
    && useradd --uid 10001 --gid 10001 --home-dir /home/rljob --create-home --shell /usr/sbin/nologin rljob
WORKDIR /src
# Only what the dependency step reads: a source edit does not invalidate the dependency layers below.
COPY pyproject.toml ./
COPY hack/install.sh hack/install.sh
COPY hack/maxtext-constraints.txt hack/maxtext-constraints.txt

FROM maxtext-base AS trainer-maxtext-deps
ARG JAX_VARIANT=tpu
RUN JAX_VARIANT="${JAX_VARIANT}" hack/install.sh deps maxtext

FROM trainer-maxtext-deps AS trainer-maxtext
COPY README.md ./
COPY rljob/ rljob/
COPY operator/ operator/
COPY trainer/ trainer/
COPY cli/ cli/
RUN hack/install.sh project \
    && rm -rf /src \
    && mkdir -p /home/rljob/.cache/jax \
    && chown -R 10001:10001 /home/rljob
# A writable HOME, and JAX's persistent compilation cache in it (mount a volume there to keep compiled
# programs across restarts of the same job).
ENV HOME=/home/rljob \
    JAX_COMPILATION_CACHE_DIR=/home/rljob/.cache/jax
WORKDIR /home/rljob
# The examples' local files (the tiny demo's tokenizer and dataset): relative paths in an RLJob resolve here.
COPY --chown=10001:10001 examples/ examples/
USER 10001:10001
# Exec form: tini, then Python, with no shell in between to swallow SIGTERM.
ENTRYPOINT ["tini", "--", "python", "-m", "rljob_trainer"]
CMD ["--config", "/etc/rljob/rljob.yaml"]

# --- operator image (last stage: the default target) -------------------------------------------------
FROM operator-deps AS operator
COPY README.md ./
COPY rljob/ rljob/
COPY operator/ operator/
COPY trainer/ trainer/
COPY cli/ cli/
# The trainer package comes along (setuptools packages all three) but its JAX dependencies do not; the
# operator never imports it.
RUN hack/install.sh project \
    && rm -rf /src
ENV HOME=/tmp
WORKDIR /tmp
USER 10001:10001
ENTRYPOINT ["tini", "--", "python", "-m", "rljob_operator"]
CMD ["--all-namespaces"]
