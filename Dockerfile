# The Event Coordinator worker image; docker-compose.yml builds it for the `worker` service.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# .dockerignore keeps local state (.venv, .temporal, .git, caches) out of the build context.
COPY . /tmp/src
RUN pip install --no-cache-dir /tmp/src && rm -rf /tmp/src

RUN useradd --create-home --uid 10001 coord
USER coord
WORKDIR /home/coord

CMD ["coord", "worker"]
