# The gpumeter image (docs/deploy.md): the wheel built from this repository, installed with its dependencies
# pinned by requirements.lock — the same install .ci/package-check proves in a clean virtualenv on every CI run.
# One image serves the Dagster user-code deployment, its run pods and the dashboard:
#   dagster code server:  dagster api grpc -m gpumeter.pipelines.definitions -h 0.0.0.0 -p 3030
#   a run pod:            started by K8sRunLauncher with the same image
#   the dashboard:        gpumeter dashboard --config /etc/gpumeter/config.yaml --host 0.0.0.0
#
#   docker build -t registry.example.com/gpumeter:0.2.0 .
#   docker build --build-arg DAGSTER_INTEGRATIONS="dagster-k8s dagster-postgres" -t ... .
# DAGSTER_INTEGRATIONS: the libraries the Dagster instance of the Helm chart loads in every pod that runs code
# (K8sRunLauncher, Postgres storage); pip takes the release that matches requirements.lock's dagster.

FROM python:3.11-slim AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install --no-cache-dir build==1.6.1 && python -m build --wheel --outdir /dist .

FROM python:3.11-slim
ARG DAGSTER_INTEGRATIONS=""
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DAGSTER_HOME=/opt/dagster/home \
    GPUMETER_CONFIG=/etc/gpumeter/config.yaml
# Pango and a font for the PDF invoices (WeasyPrint).
RUN apt-get update \
    && apt-get install -y --no-install-recommends libpango-1.0-0 libpangoft2-1.0-0 fonts-dejavu-core \
    && rm -rf /var/lib/apt/lists/*
COPY requirements.lock /tmp/requirements.lock
COPY --from=wheel /dist/ /tmp/dist/
RUN pip install --no-cache-dir -c /tmp/requirements.lock --find-links /tmp/dist "gpumeter[k8s]" $DAGSTER_INTEGRATIONS \
    && rm -rf /tmp/dist /tmp/requirements.lock \
    && mkdir -p "$DAGSTER_HOME" /etc/gpumeter \
    && useradd --create-home --uid 10001 gpumeter \
    && chown gpumeter "$DAGSTER_HOME"
USER gpumeter
WORKDIR /home/gpumeter
EXPOSE 3030 8501
# The Dagster code location; the Helm chart passes its own arguments (dagsterApiGrpcArgs).
CMD ["dagster", "api", "grpc", "-m", "gpumeter.pipelines.definitions", "-h", "0.0.0.0", "-p", "3030"]
