# stratamem, embedded, in one container: the service (`stratamem serve`) over the SQLite store in
# the /data volume, the local embedding model (all-MiniLM-L6-v2, shipped in a package: nothing is
# downloaded at run time), the pipeline in-process. See README, "Running in a container".
#
#   docker build -t stratamem .
#   docker compose up -d                 # or: docker run -p 127.0.0.1:8420:8420 -v stratamem-data:/data stratamem

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# The CPU build of torch: the default index would bring the multi-GB CUDA one.
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY src ./src
RUN python -m venv /opt/stratamem \
    && /opt/stratamem/bin/pip install --extra-index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}" \
    && echo "torch==${TORCH_VERSION}" > /opt/stratamem/torch-constraint.txt \
    && /opt/stratamem/bin/pip install -c /opt/stratamem/torch-constraint.txt "/src[local,server]" \
    && /opt/stratamem/bin/stratamem --help > /dev/null

FROM ${PYTHON_IMAGE}
RUN groupadd --system --gid 10001 stratamem \
    && useradd --system --uid 10001 --gid stratamem --no-create-home --home-dir /data stratamem \
    && mkdir /data \
    && chown stratamem:stratamem /data
COPY --from=build /opt/stratamem /opt/stratamem
ENV PATH=/opt/stratamem/bin:${PATH} \
    PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 \
    STRATAMEM_DATA_DIR=/data \
    STRATAMEM_SERVER_HOST=0.0.0.0 \
    STRATAMEM_SERVER_PORT=8420
USER 10001:10001
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8420
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8420/v1/health', timeout=4)"]
ENTRYPOINT ["stratamem"]
CMD ["serve"]
