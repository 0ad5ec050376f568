# The streamscope image: the six streamscope wheels (the SDK and the server side) on a pinned slim Python, run as
# a non-root user.
# Every compose service runs the one entrypoint, `streamscope`, with its own subcommand.
FROM python:3.11.14-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN pip install --no-cache-dir hatchling \
    && pip wheel --no-cache-dir --no-deps --no-build-isolation -w /wheels . ingest collector gpu_agent dashboards cli

FROM python:3.11.14-slim-bookworm
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels \
    && useradd --create-home --uid 10001 streamscope \
    && install -d -o streamscope -g streamscope /home/streamscope/data
USER streamscope
ENV STREAMSCOPE_DATA_DIR=/home/streamscope/data
EXPOSE 4317 4318
ENTRYPOINT ["streamscope"]
CMD ["collector", "--host", "0.0.0.0"]
