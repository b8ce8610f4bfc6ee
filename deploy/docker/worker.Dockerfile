# baton/worker: the reference controllers, a static binary built by
# scripts/images.sh. Built FROM scratch so no image registry is needed.
# Workers are stateless and scale out (docker-compose up --scale worker=N).
FROM scratch
COPY baton-worker /usr/local/bin/baton-worker
USER 65532:65532
# HTTP only (/metrics, /healthz, /readyz): a worker serves no gRPC API.
EXPOSE 9092
HEALTHCHECK --interval=5s --timeout=4s --start-period=10s --retries=5 \
  CMD ["/usr/local/bin/baton-worker", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/baton-worker"]
