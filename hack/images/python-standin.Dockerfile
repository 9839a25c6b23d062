# Stand-ins for python:3.11-slim-bookworm and python:3.12-slim-bookworm, for machines that reach no image
# registry (CI, the shared dev machines). hack/image.sh builds them FROM a Debian bookworm rootfs it made with
# debootstrap and tags them with the exact names the project's Dockerfile uses, so that file builds unchanged.
# What they differ in from the real images: docs/install.md ("Stand-in base images").
#
# Context (hack/image.sh stages it): ca-certificates.crt (the machine's CA bundle: egress may go through a
# TLS-intercepting proxy), pip.conf (`cert` = that bundle), debian.sources (the machine's apt mirror) and,
# for py312, python/ (a CPython 3.12 prefix: bin/, lib/, include/).
ARG BASE=localhost/rljob-standin-debian:bookworm

FROM ${BASE} AS common
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# As in the real images: /usr/local/bin first, a UTF-8 locale without the locales package.
ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8
COPY debian.sources /etc/apt/sources.list.d/debian.sources
COPY ca-certificates.crt pip.conf /tmp/standin/
# The real slim images carry ca-certificates, netbase and tzdata; the machine's bundle replaces Debian's
# (it is a superset here: Debian's roots plus the proxy's) and pip reads it through /etc/pip.conf.
RUN rm -f /etc/apt/sources.list \
    && apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates netbase tzdata \
    && rm -rf /var/lib/apt/lists/* \
    && install -m 0644 /tmp/standin/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt \
    && install -m 0644 /tmp/standin/pip.conf /etc/pip.conf \
    && rm -rf /tmp/standin

# python:3.11-slim-bookworm: Debian's own 3.11 (with venv and its bundled pip), linked into /usr/local/bin
# where the real image installs its python.org build.
FROM common AS py311
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3.11 python3.11-venv \
    && rm -rf /var/lib/apt/lists/* \
    && for name in python python3 python3.11; do ln -s /usr/bin/python3.11 "/usr/local/bin/${name}"; done \
    && python -m ensurepip --version >/dev/null \
    && python -c 'import ssl, sqlite3, venv'
CMD ["python3"]

# python:3.12-slim-bookworm: Debian 12 has no 3.12, so a CPython built on this machine (an interpreter of the
# same Debian release, e.g. pyenv's) is copied into /usr/local, as the real image lays out its own build, with
# the shared libraries its extension modules link against.
FROM common AS py312
RUN apt-get update \
    && apt-get install -y --no-install-recommends libbz2-1.0 libcrypt1 libexpat1 libffi8 liblzma5 \
       libncursesw6 libreadline8 libsqlite3-0 libssl3 libtirpc3 libnsl2 libuuid1 zlib1g \
    && rm -rf /var/lib/apt/lists/*
COPY python/ /usr/local/
RUN ldconfig \
    && for name in python python3; do ln -sf /usr/local/bin/python3.12 "/usr/local/bin/${name}"; done \
    && python -m ensurepip --version >/dev/null \
    && python -c 'import ssl, sqlite3, venv, ctypes, lzma, bz2, zlib; import sys; assert sys.version_info[:2] == (3, 12), sys.version'
CMD ["python3"]
