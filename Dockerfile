# One image for web, worker, beat and migrate.
FROM python:3.11-slim AS assets
RUN apt-get update && apt-get install -y --no-install-recommends nodejs npm && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json .npmrc ./
RUN npm ci --no-audit --no-fund

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 DEBUG=false
WORKDIR /app
COPY pyproject.toml ./
COPY portal portal
COPY tenants tenants
COPY scheduling scheduling
COPY accounting accounting
RUN pip install --no-cache-dir .
COPY . .
COPY --from=assets /app/node_modules node_modules
RUN SECRET_KEY=collectstatic-only python manage.py collectstatic --noinput \
    && useradd --create-home --uid 10001 portal && mkdir -p var && chown portal var
USER portal
EXPOSE 8000
CMD ["gunicorn", "portal.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3"]
