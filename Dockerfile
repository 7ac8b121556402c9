# The image the manifests in k8s/ name (ghcr.io/vcemu/vcemu): `vcemu coordinator`, `vcemu agent`, and,
# for the KubeRay overlay, Ray's own `ray start` (ray is a dependency of the package once the Ray backend
# is in; its `default` extra adds the dashboard and the dashboard agent, whose HTTP health endpoints, on 8265 and
# 52365, KubeRay's default probes of Ray pods call: plain `ray` serves neither). Build from the repository root:
#   docker build -t ghcr.io/vcemu/vcemu:0.1.0 .
# The non-editable install runs setup.py's build hook, which generates vcemu/v1/*_pb2*.py from proto/; it takes the
# versions the project tested (constraints.txt), as `make install` does.
ARG PYTHON=3.11
# The Ray the image installs: KubeRay requires the RayCluster's rayVersion (k8s/overlays/kuberay) to be the image's.
ARG RAY_VERSION=2.60.0

FROM python:${PYTHON}-slim-bookworm AS build
ARG RAY_VERSION
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml setup.py README.md constraints.txt ./
COPY proto/ proto/
COPY coordinator/ coordinator/
COPY node_agent/ node_agent/
COPY workloads/ workloads/
COPY vcemu/ vcemu/
RUN python -m venv /opt/vcemu \
 && /opt/vcemu/bin/pip install --upgrade pip -c constraints.txt \
 && /opt/vcemu/bin/pip install -c constraints.txt . "ray[default]==${RAY_VERSION}" \
 && /opt/vcemu/bin/vcemu --help >/dev/null \
 && /opt/vcemu/bin/vcemu agent --help >/dev/null

FROM python:${PYTHON}-slim-bookworm
# wget: KubeRay's default health probes of Ray pods call it. tini: signals reach vcemu as PID 1's child,
# so SIGTERM from the kubelet stops the agent cleanly (it kills its tasks and removes its cgroups).
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini wget \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 vcemu \
 && useradd --uid 10001 --gid 10001 --create-home --shell /bin/bash vcemu
COPY --from=build /opt/vcemu /opt/vcemu
# numba caches the policies' compiled kernels beside their sources or under $HOME, neither writable in the pods
# (read-only root filesystem; the package belongs to root): without a writable cache directory it refuses to import
# them and vcemu coordinator dies at start. /tmp is a writable volume in every pod of k8s/.
ENV PATH=/opt/vcemu/bin:$PATH PYTHONUNBUFFERED=1 NUMBA_CACHE_DIR=/tmp/numba-cache
# The coordinator runs as this user; the agent's DaemonSet runs as root (cgroup control).
USER 10001:10001
WORKDIR /home/vcemu
EXPOSE 50051 50052 9100 9101
ENTRYPOINT ["/usr/bin/tini", "--", "vcemu"]
CMD ["--help"]
