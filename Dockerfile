# One image for web, worker, beat and migrate.
FROM python:3.11-slim AS assets
RUN apt-get update && apt-get install -y --no-install-recommends nodejs npm && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json .npmrc ./
RUN npm ci --omit=dev --no-audit --no-fund

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 DEBUG=false
WORKDIR /app
COPY pyproject.toml ./
COPY portal portal
COPY tenants tenants
COPY scheduling scheduling
COPY runtime runtime
COPY accounting accounting
RUN pip install --no-cache-dir .
COPY . .
COPY --from=assets /app/node_modules node_modules
# Static files are collected at build time (served by WhiteNoise); the code stays root-owned and
# read-only for the portal user, which may write only var/ and /tmp (emptyDirs in Kubernetes).
RUN SECRET_KEY=collectstatic-only python manage.py collectstatic --noinput \
    && groupadd --gid 10001 portal \
    && useradd --create-home --uid 10001 --gid 10001 portal \
    && mkdir -p var && chown portal:portal var
USER 10001:10001
EXPOSE 8000
# The same image runs web (this default), `celery -A portal worker`, `celery -A portal beat` and
# `python manage.py migrate`; see docker-compose.yml and deploy/helm/gpu-portal.
# The web tier is ASGI: gunicorn with uvicorn workers (portal/gunicorn_config.py).
CMD ["gunicorn", "--config", "python:portal.gunicorn_config", "--bind", "0.0.0.0:8000", \
     "--workers", "3", "--worker-tmp-dir", "/tmp"]
