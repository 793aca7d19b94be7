# autotune on a vLLM node: the official vLLM OpenAI-server image plus autotune[vllm,postgres].
# DSpark needs a recent vLLM, so the default base is the nightly image; pin a tag with
#   docker build --build-arg VLLM_IMAGE_TAG=v0.33.0 -t autotune .
ARG VLLM_IMAGE_TAG=nightly
FROM vllm/vllm-openai:${VLLM_IMAGE_TAG}

# The vLLM image's entrypoint is the API server; autotune launches servers itself.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    AUTOTUNE_HOME=/var/lib/autotune

COPY pyproject.toml README.md /src/autotune/
COPY autotune /src/autotune/autotune
RUN python3 -m pip install "/src/autotune[vllm,postgres]" \
    && useradd --create-home --uid 10001 --shell /usr/sbin/nologin autotune \
    && mkdir -p /var/lib/autotune/storage /data \
    && chown -R autotune:autotune /var/lib/autotune

USER autotune
# storage/ (the SQLite DB, exports, the daemon's state file) lives in the working directory;
# mount a volume here, or point AUTOTUNE_DB_URL at PostgreSQL.
WORKDIR /var/lib/autotune
VOLUME ["/var/lib/autotune"]

HEALTHCHECK --interval=60s --timeout=20s --start-period=120s --retries=3 \
    CMD ["autotune", "status", "--check", "--format", "json"]
ENTRYPOINT ["autotune"]
CMD ["start", "--traffic", "/data/traffic.jsonl"]
